// The single translation of CUDA runtime result codes into absl::Status
// (NCCL's: nccl_status.h).
#ifndef REFIT_EXEC_CUDA_CUDA_STATUS_H_
#define REFIT_EXEC_CUDA_CUDA_STATUS_H_

#include <string>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace refit {

// OK for cudaSuccess; else INTERNAL (UNAVAILABLE for a missing device or
// driver, RESOURCE_EXHAUSTED for out of memory) "<what>: <cuda error>".
absl::Status CudaStatus(cudaError_t e, const std::string& what);

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_CUDA_STATUS_H_
