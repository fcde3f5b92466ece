// The single translation of NCCL result codes into absl::Status.
#ifndef REFIT_EXEC_TRANSPORT_CUDA_NCCL_STATUS_H_
#define REFIT_EXEC_TRANSPORT_CUDA_NCCL_STATUS_H_

#include <string>

#include <nccl.h>

#include "absl/status/status.h"

namespace refit {

// OK for ncclSuccess (and ncclInProgress); else UNAVAILABLE for system /
// remote errors, INVALID_ARGUMENT for invalid usage, INTERNAL otherwise:
// "<what>: <nccl error> (<ncclGetLastError(comm)>)". comm may be null.
absl::Status NcclStatus(ncclResult_t r, const std::string& what,
                        ncclComm_t comm = nullptr);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_CUDA_NCCL_STATUS_H_
