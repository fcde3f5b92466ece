#include "layout/quant_format.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace refit {
namespace {

constexpr QuantFormat kAll[] = {QuantFormat::kFp8Tensor,      QuantFormat::kFp8Block,
                                QuantFormat::kFp8BlockUe8m0, QuantFormat::kFp8BlockRequantUe8m0,
                                QuantFormat::kMxfp8,          QuantFormat::kNvfp4};

TEST(QuantFormatTest, EveryFormatHasOneRowMajorRow) {
  for (QuantFormat f : kAll) {
    int n = 0;
    for (const QuantFormatRow& r : kQuantFormatRows) {
      n += r.format == f && r.swizzle == ScaleSwizzle::kRowMajor;
    }
    EXPECT_EQ(n, 1) << QuantFormatName(f);
    EXPECT_EQ(QuantFormatTraits(f).format, f);
  }
}

TEST(QuantFormatTest, RowsAreDistinct) {
  std::set<std::pair<int32_t, int32_t>> seen;
  for (const QuantFormatRow& r : kQuantFormatRows) {
    EXPECT_TRUE(seen.insert({static_cast<int32_t>(r.format), static_cast<int32_t>(r.swizzle)})
                    .second)
        << r.name;
  }
}

TEST(QuantFormatTest, RowsHoldTheFormatsBytes) {
  // What vLLM's kernels read: FP8 128 x 128 tiles of f32 scales, MXFP8 1 x 32
  // E8M0 bytes, NVFP4 1 x 16 e4m3 scales over packed E2M1 with a global.
  static_assert(QuantFormatTraits(QuantFormat::kFp8Block).block_rows == 128, "");
  static_assert(QuantFormatTraits(QuantFormat::kMxfp8).block_cols == 32, "");
  static_assert(QuantFormatTraits(QuantFormat::kNvfp4).block_cols == 16, "");
  EXPECT_EQ(ScaleElementBytes(QuantFormat::kFp8Block), 4);
  EXPECT_EQ(ScaleElementBytes(QuantFormat::kMxfp8), 1);
  EXPECT_EQ(ScaleElementBytes(QuantFormat::kNvfp4), 1);
  EXPECT_EQ(QuantFormatTraits(QuantFormat::kNvfp4).codes_per_byte, 2);
  EXPECT_TRUE(QuantFormatTraits(QuantFormat::kNvfp4).global_scale);
  EXPECT_FALSE(QuantFormatTraits(QuantFormat::kMxfp8).global_scale);
  EXPECT_TRUE(QuantFormatTraits(QuantFormat::kFp8BlockUe8m0).pow2_scales);
  EXPECT_FALSE(QuantFormatTraits(QuantFormat::kFp8Block).pow2_scales);
}

TEST(QuantFormatTest, FindsSwizzledRowsAndNamesAMissingOne) {
  auto nv = FindQuantFormat(QuantFormat::kNvfp4, ScaleSwizzle::kTiles128x4);
  ASSERT_TRUE(nv.ok()) << nv.status();
  EXPECT_EQ(nv->block_cols, 16);
  auto fp8 = FindQuantFormat(QuantFormat::kFp8Block, ScaleSwizzle::kTiles128x4);
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fp8.status().message().find("fp8_block"), absl::string_view::npos);
  EXPECT_NE(fp8.status().message().find("128x4"), absl::string_view::npos);
}

TEST(QuantFormatTest, DeepgemmSm100ScalesAreExponentBytes) {
  auto p = FindQuantFormat(QuantFormat::kFp8BlockRequantUe8m0, ScaleSwizzle::kPackedUe8m0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->scale_dtype, DType::kU8);
  EXPECT_EQ(p->block_rows, 128);
  EXPECT_EQ(p->block_cols, 128);
  EXPECT_TRUE(p->pow2_scales);
  EXPECT_FALSE(FindQuantFormat(QuantFormat::kFp8Block, ScaleSwizzle::kPackedUe8m0).ok());
}

}  // namespace
}  // namespace refit
