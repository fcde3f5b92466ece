// The CUDA copier: the executor's device staging and pack/unpack and
// conversion kernels, on the lane streams of a device transport.
#ifndef REFIT_EXEC_CUDA_CUDA_COPIER_H_
#define REFIT_EXEC_CUDA_CUDA_COPIER_H_

#include <memory>

#include "exec/convert/copier.h"
#include "exec/transport/cuda/cuda_lanes.h"

namespace refit {

// Returns a copier with device staging (cudaMalloc) and copies
// (pack_kernels) on `t`'s lane streams (NcclTransport). `t`
// must outlive the engine. Never fails; its calls return the CUDA errors
// (CudaStatus).
std::unique_ptr<Copier> MakeCudaCopier(CudaLanes* t);

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_CUDA_COPIER_H_
