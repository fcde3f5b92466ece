#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(GrpcStatusTest, RoundTripKeepsCodeAndMessage) {
  for (int c = 0; c <= 16; ++c) {
    absl::Status s(static_cast<absl::StatusCode>(c), c == 0 ? "" : "why");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_EQ(ToGrpcStatus(absl::AbortedError("round 7: rank 2 died"))
                .error_message(),
            "round 7: rank 2 died");
}

}  // namespace
}  // namespace refit
