#include "layout/dtype.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(DTypeTest, SizesAndNamesRoundTrip) {
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3,
                  DType::kF8E5M2, DType::kI8, DType::kU8, DType::kI32,
                  DType::kI64, DType::kF64, DType::kBytes}) {
    EXPECT_EQ(ParseDType(DTypeName(t)).value(), t);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
}

TEST(DTypeTest, ParsesAliasesAndRejectsUnknown) {
  EXPECT_EQ(ParseDType("BF16").value(), DType::kBF16);
  EXPECT_EQ(ParseDType("F8_E4M3").value(), DType::kF8E4M3);
  EXPECT_EQ(ParseDType("float8_e4m3fn").value(), DType::kF8E4M3);
  auto bad = ParseDType("complex64");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("complex64"), std::string::npos);
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_TRUE(IsValidDType(1));
}

}  // namespace
}  // namespace refit
