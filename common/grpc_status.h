// The one translation between absl::Status and grpc::Status. The numeric
// codes of both are the canonical Google codes; grpc_status.cc static_asserts
// that they match, so translation keeps code and message exactly.
#ifndef REFIT_COMMON_GRPC_STATUS_H_
#define REFIT_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace refit {

// Returns the grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Returns the absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace refit

#endif  // REFIT_COMMON_GRPC_STATUS_H_
