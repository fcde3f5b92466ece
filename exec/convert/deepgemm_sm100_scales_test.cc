#include "exec/convert/deepgemm_sm100_scales.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/reference_nvfp4_vllm.h"

namespace refit {
namespace {

// Random powers of two in [2^-20, 2^4], as a UE8M0 requantization leaves.
std::vector<float> Pow2Scales(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> s(count);
  for (float& x : s) x = std::ldexp(1.0f, static_cast<int>(rng() % 25) - 20);
  return s;
}

// Shapes with partial tiles, partial int32 groups and unaligned rows, and
// stacked experts: each expert's bytes equal the reference's (written from
// DeepGEMM's torch statement, testing/reference_nvfp4_vllm.h).
TEST(DeepgemmSm100ScalesTest, EqualsTheReferencePerExpert) {
  struct Case {
    int64_t experts, n, k;
  };
  for (const Case& c : {Case{1, 128, 512}, Case{1, 130, 700}, Case{1, 1, 1},
                        Case{1, 257, 4096 + 128}, Case{3, 98, 1536}, Case{2, 384, 640}}) {
    SCOPED_TRACE(::testing::Message() << c.experts << " x [" << c.n << ", " << c.k << "]");
    const int64_t per = ((c.n + 127) / 128) * ((c.k + 127) / 128);
    const std::vector<float> tiles = Pow2Scales(c.experts * per, static_cast<uint32_t>(c.n + c.k));
    const DeepgemmSm100ScaleShape s = DeepgemmSm100Scales(c.n, c.k);
    EXPECT_EQ(s.packed_k, (c.k + 511) / 512);
    EXPECT_EQ(s.aligned_n % 4, 0);
    std::vector<uint8_t> got(c.experts * s.bytes(), 0xAB);
    ASSERT_TRUE(PackDeepgemmSm100Scales(tiles, c.experts, c.n, c.k, absl::MakeSpan(got), "w").ok());
    for (int64_t e = 0; e < c.experts; ++e) {
      const std::vector<float> one(tiles.begin() + e * per, tiles.begin() + (e + 1) * per);
      const std::vector<uint8_t> want = testing::ReferenceDeepgemmSm100Scales(one, c.n, c.k);
      ASSERT_EQ(static_cast<int64_t>(want.size()), s.bytes());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data() + e * s.bytes(), want.size()))
          << "expert " << e;
    }
  }
}

// A 5 x 700 weight by hand: 6 exponents a row (bytes 4-5 of the second
// int32 zero), rows 5-7 padding; int32 (r, j) at [j, 8 rows].
TEST(DeepgemmSm100ScalesTest, PlacesExponentsMnMajor) {
  std::vector<float> tiles(6);
  for (int c = 0; c < 6; ++c) tiles[c] = std::ldexp(1.0f, c - 3);  // exponents 124..129
  std::vector<uint8_t> got(DeepgemmSm100Scales(5, 700).bytes());
  ASSERT_EQ(got.size(), 2u * 8 * 4);
  ASSERT_TRUE(PackDeepgemmSm100Scales(tiles, 1, 5, 700, absl::MakeSpan(got), "w").ok());
  for (int r = 0; r < 8; ++r) {
    for (int j = 0; j < 2; ++j) {
      for (int b = 0; b < 4; ++b) {
        const int c = 4 * j + b;
        const uint8_t want = r < 5 && c < 6 ? static_cast<uint8_t>(124 + c) : 0;
        EXPECT_EQ(got[(j * 8 + r) * 4 + b], want) << "row " << r << " int32 " << j << " byte " << b;
      }
    }
  }
}

TEST(DeepgemmSm100ScalesTest, RefusesWhatUe8m0CannotHoldNamingTheTensor) {
  std::vector<uint8_t> out(DeepgemmSm100Scales(128, 128).bytes());
  for (float bad : {0.75f, 0.0f, -0.5f, 1e-40f, INFINITY}) {
    const absl::Status s =
        PackDeepgemmSm100Scales({bad}, 1, 128, 128, absl::MakeSpan(out), "layers.0.w");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), "layers.0.w")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "power of two")) << s;
  }
  const absl::Status sizes =
      PackDeepgemmSm100Scales({1.0f, 1.0f}, 1, 128, 128, absl::MakeSpan(out), "layers.1.w");
  EXPECT_EQ(sizes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(sizes.message(), "layers.1.w")) << sizes;
  EXPECT_FALSE(PackDeepgemmSm100Scales({}, 1, 0, 128, absl::MakeSpan(out), "w").ok());
}

}  // namespace
}  // namespace refit
