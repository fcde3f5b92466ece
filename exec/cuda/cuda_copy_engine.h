// The CUDA copy engine: the executor's device staging and pack/unpack and
// conversion kernels, on the lane streams of a device transport.
#ifndef REFIT_EXEC_CUDA_CUDA_COPY_ENGINE_H_
#define REFIT_EXEC_CUDA_CUDA_COPY_ENGINE_H_

#include <memory>

#include "exec/copy_engine.h"
#include "exec/cuda/cuda_lanes.h"

namespace refit {

// Returns a copy engine with device staging (cudaMalloc) and copies
// (pack_kernels) on `t`'s lane streams (NcclTransport). `t`
// must outlive the engine. Never fails; its calls return the CUDA errors
// (CudaStatus).
std::unique_ptr<CopyEngine> MakeCudaCopyEngine(CudaLanes* t);

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_CUDA_COPY_ENGINE_H_
