#include "layout/tensor_spec.h"

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

TEST(TensorSpecTest, StackedNamesExpandPerMember) {
  TensorSpec t{"layers.3.experts.{}.up.weight", {8, 4, 2}, DType::kBF16, true};
  EXPECT_TRUE(ValidateTensorSpec(t).ok());
  EXPECT_EQ(MemberName(t, 5), "layers.3.experts.5.up.weight");
  EXPECT_EQ(DescribePart(t, Box::Make({2, 0, 0}, {3, 4, 1}).value()),
            "layers.3.experts.{2..4}.up.weight [0:4, 0:1]");
  TensorSpec bad{"layers.3.experts.up.weight", {8, 4}, DType::kBF16, true};
  EXPECT_FALSE(ValidateTensorSpec(bad).ok());
}

}  // namespace
}  // namespace refit
