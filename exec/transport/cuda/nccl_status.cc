// NCCL result codes -> absl::Status.
#include "exec/transport/cuda/nccl_status.h"

#include "absl/strings/str_cat.h"

namespace refit {

absl::Status NcclStatus(ncclResult_t r, const std::string& what,
                        ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  const char* last = ncclGetLastError(comm);
  const std::string msg = absl::StrCat(what, ": ", ncclGetErrorString(r),
                                       last && *last ? absl::StrCat(" (", last, ")") : "");
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace refit
