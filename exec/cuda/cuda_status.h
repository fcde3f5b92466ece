// The single translation of CUDA and NCCL result codes into absl::Status.
#ifndef REFIT_EXEC_CUDA_CUDA_STATUS_H_
#define REFIT_EXEC_CUDA_CUDA_STATUS_H_

#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace refit {

// OK for cudaSuccess; else INTERNAL (UNAVAILABLE for a missing device or
// driver, RESOURCE_EXHAUSTED for out of memory) "<what>: <cuda error>".
absl::Status CudaStatus(cudaError_t e, const std::string& what);

// OK for ncclSuccess (and ncclInProgress); else UNAVAILABLE for system /
// remote errors, INVALID_ARGUMENT for invalid usage, INTERNAL otherwise:
// "<what>: <nccl error> (<ncclGetLastError(comm)>)". comm may be null.
absl::Status NcclStatus(ncclResult_t r, const std::string& what,
                        ncclComm_t comm = nullptr);

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_CUDA_STATUS_H_
