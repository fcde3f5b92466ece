#include "common/status_macros.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  REFIT_ASSIGN_OR_RETURN(int h, Half(x));
  REFIT_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckQuarter(int x) {
  REFIT_RETURN_IF_ERROR(Quarter(x));
  return absl::OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesValueAndError) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckQuarter(4).ok());
  EXPECT_FALSE(CheckQuarter(2).ok());
}

TEST(StatusMacrosTest, AnnotateKeepsCodeAndPrependsContext) {
  absl::Status s = AnnotateStatus(absl::NotFoundError("gone"), "tensor w, rank 3");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "tensor w, rank 3: gone");
  EXPECT_TRUE(AnnotateStatus(absl::OkStatus(), "x").ok());
}

}  // namespace
}  // namespace refit
