// The single translation of CUDA runtime result codes into absl::Status
// (NCCL's: nccl_status.h).
#ifndef REFIT_EXEC_CUDA_CUDA_STATUS_H_
#define REFIT_EXEC_CUDA_CUDA_STATUS_H_

#include <string>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace refit {

// OK for cudaSuccess; else INTERNAL (UNAVAILABLE for a missing device or
// driver, RESOURCE_EXHAUSTED for out of memory) "<what>: <cuda error>".
absl::Status CudaStatus(cudaError_t e, const std::string& what);

// As above, but every error gets `code` (a data plane that documents one
// code for device errors, e.g. the pull path's UNAVAILABLE), and the
// thread's last CUDA error is cleared.
absl::Status CudaStatus(cudaError_t e, const std::string& what, absl::StatusCode code);

}  // namespace refit

// Returns CudaStatus(x, "x") from the enclosing function (returning
// absl::Status or absl::StatusOr) when the CUDA runtime call `x` fails.
#define REFIT_RETURN_IF_CUDA_ERROR(x) REFIT_RETURN_IF_ERROR(::refit::CudaStatus((x), #x))

#endif  // REFIT_EXEC_CUDA_CUDA_STATUS_H_
