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

TEST(TensorSpecTest, FormatAgreesWithDtypeAndRole) {
  TensorSpec w{"w", {4, 8}, DType::kU8};
  w.format = QuantFormat::kNvfp4;
  w.quant_role = QuantRole::kCodes;
  EXPECT_TRUE(ValidateTensorSpec(w).ok());
  EXPECT_EQ(TensorFormatString(w), "nvfp4 codes");
  w.dtype = DType::kBF16;
  absl::Status s = ValidateTensorSpec(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor w: format nvfp4 holds its codes as u8, not bf16"),
            std::string::npos)
      << s;
  TensorSpec sc{"w_scale_inv", {1, 1}, DType::kU8};
  sc.format = QuantFormat::kFp8BlockRequantUe8m0;  // packed exponent bytes
  sc.quant_role = QuantRole::kScales;
  EXPECT_TRUE(ValidateTensorSpec(sc).ok());
  sc.format = QuantFormat::kFp8Block;  // f32 scales only
  EXPECT_FALSE(ValidateTensorSpec(sc).ok());
  TensorSpec g{"w_scale_2", {}, DType::kF32};
  g.format = QuantFormat::kMxfp8;
  g.quant_role = QuantRole::kGlobalScale;
  EXPECT_FALSE(ValidateTensorSpec(g).ok());
  g.format = QuantFormat::kNvfp4;
  EXPECT_TRUE(ValidateTensorSpec(g).ok());
  g.quant_role = QuantRole::kNone;  // a format without a role
  EXPECT_FALSE(ValidateTensorSpec(g).ok());
  TensorSpec plain{"b", {4}, DType::kBF16};
  plain.quant_role = QuantRole::kScales;  // a role without a format
  EXPECT_FALSE(ValidateTensorSpec(plain).ok());
}

}  // namespace
}  // namespace refit
