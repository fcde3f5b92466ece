// ConvertOps on device memory (exec/convert/convert.h) with the kernels of
// convert_kernels.h, on one CUDA stream.
#ifndef REFIT_EXEC_CONVERT_CUDA_CUDA_CONVERT_OPS_H_
#define REFIT_EXEC_CONVERT_CUDA_CUDA_CONVERT_OPS_H_

#include <memory>

#include "exec/convert/convert.h"

namespace refit {

// The conversion steps on `stream` (a cudaStream_t) of the current device.
std::unique_ptr<ConvertOps> MakeCudaConvertOps(void* stream);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_CUDA_CONVERT_OPS_H_
