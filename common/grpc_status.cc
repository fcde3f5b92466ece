#include "common/grpc_status.h"

#include <string>

namespace refit {

#define REFIT_SAME_CODE(a, g)                                              \
  static_assert(static_cast<int>(absl::StatusCode::a) ==                 \
                    static_cast<int>(grpc::StatusCode::g),               \
                "absl and grpc status codes differ: " #a)
REFIT_SAME_CODE(kOk, OK);
REFIT_SAME_CODE(kCancelled, CANCELLED);
REFIT_SAME_CODE(kUnknown, UNKNOWN);
REFIT_SAME_CODE(kInvalidArgument, INVALID_ARGUMENT);
REFIT_SAME_CODE(kDeadlineExceeded, DEADLINE_EXCEEDED);
REFIT_SAME_CODE(kNotFound, NOT_FOUND);
REFIT_SAME_CODE(kAlreadyExists, ALREADY_EXISTS);
REFIT_SAME_CODE(kPermissionDenied, PERMISSION_DENIED);
REFIT_SAME_CODE(kResourceExhausted, RESOURCE_EXHAUSTED);
REFIT_SAME_CODE(kFailedPrecondition, FAILED_PRECONDITION);
REFIT_SAME_CODE(kAborted, ABORTED);
REFIT_SAME_CODE(kOutOfRange, OUT_OF_RANGE);
REFIT_SAME_CODE(kUnimplemented, UNIMPLEMENTED);
REFIT_SAME_CODE(kInternal, INTERNAL);
REFIT_SAME_CODE(kUnavailable, UNAVAILABLE);
REFIT_SAME_CODE(kDataLoss, DATA_LOSS);
REFIT_SAME_CODE(kUnauthenticated, UNAUTHENTICATED);
#undef REFIT_SAME_CODE

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace refit
