#include "reshard/tensor_spec.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(TensorSpecTest, ValidatesAndNamesTheTensor) {
  EXPECT_TRUE(ValidateTensorSpec({"w", {4, 8}, DType::kBF16}).ok());
  absl::Status s = ValidateTensorSpec({"model.w", {4, -1}, DType::kBF16});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.w"), std::string::npos);
  EXPECT_FALSE(ValidateTensorSpec({"", {1}, DType::kF32}).ok());
  EXPECT_FALSE(
      ValidateTensorSpec({"big", {1LL << 40, 1LL << 40}, DType::kF32}).ok());
  EXPECT_EQ(TensorSpecString({"w", {4, 8}, DType::kF32}), "w f32[4, 8]");
}

}  // namespace
}  // namespace refit
