#include "exec/convert/nvfp4.h"

#include "exec/convert/nvfp4_math.h"

#include <cmath>
#include <cstring>
#include <random>

#include "exec/convert/quantize.h"
#include "gtest/gtest.h"
#include "plan/conversion.h"
#include "testing/reference_quantizer.h"

namespace refit {
namespace {

// BF16 values (as bit patterns and as f32) over many magnitudes, with
// all-zero blocks, exact E2M1 ties after scaling and negative zeros.
std::vector<uint16_t> WideBf16(int64_t n, uint32_t seed, std::vector<float>* values) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<uint16_t> out(n);
  values->resize(n);
  int e = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 16 == 0) e = ex(rng);
    float x = std::ldexp(u(rng), e);
    if ((i / 16) % 11 == 3) x = 0.0f;
    if ((i / 16) % 13 == 5) x = (i % 2 ? -0.0f : std::ldexp(0.25f * (i % 24), e));
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= 0xFFFF0000u;
    out[i] = static_cast<uint16_t>(b >> 16);
    std::memcpy(&(*values)[i], &b, 4);
  }
  return out;
}

TEST(Nvfp4Test, E2M1RoundsTiesToEvenAndSaturates) {
  const float in[] = {0.0f, 0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.1f, 7.0f,
                      -0.1f, -0.0f, -2.5f, -100.0f};
  const uint8_t want[] = {0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 0, 12, 15};
  for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); ++i) {
    EXPECT_EQ(F32ToE2M1(in[i]), want[i]) << in[i];
    EXPECT_EQ(testing::ReferenceE2M1(in[i]), want[i]) << in[i];
  }
  EXPECT_EQ(E2M1ToF32(7), 6.0f);
  EXPECT_EQ(E2M1ToF32(13), -3.0f);
}

// The bit-level rounding against the reference's nearest-value search, on
// every float within 64 ulps of each E2M1 value and midpoint, and on a
// stride through [0, 8] and beyond.
TEST(Nvfp4Test, E2M1EqualsTheReferenceNearEveryBoundary) {
  std::vector<float> xs;
  for (float t : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f,
                  3.5f, 4.0f, 5.0f, 6.0f, 7.0f}) {
    uint32_t u;
    std::memcpy(&u, &t, 4);
    for (int d = -64; d <= 64; ++d) {
      const uint32_t v = u + d;
      if (t == 0.0f && d < 0) continue;
      float f;
      std::memcpy(&f, &v, 4);
      xs.push_back(f);
    }
  }
  for (uint32_t v = 0; v < 0x41800000u; v += 4099) {
    float f;
    std::memcpy(&f, &v, 4);
    xs.push_back(f);
  }
  xs.push_back(3.0e38f);
  int64_t bad = 0;
  for (float x : xs) {
    for (float s : {x, -x}) {
      if (F32ToE2M1(s) != testing::ReferenceE2M1(s)) {
        if (++bad < 5) ADD_FAILURE() << s;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(xs.size(), 200000u);
}

// The kernels' division by a reciprocal and two Markstein steps
// (exec/convert/nvfp4_math.h) against the division, on every finite BF16 value
// for divisors a block can have (e4m3 scales times global scales of many
// magnitudes), powers of two (exact E2M1 ties) and divisors whose
// mantissa is all ones, over the whole fast range (quotients that round to
// zero or to the smallest subnormal included).
TEST(Nvfp4Test, FastCodeEqualsTheDivisionForEveryBf16) {
  std::vector<float> divisors;
  for (int e = -121; e <= 127; e += 3) {
    for (float m : {1.0f, 1.5f, 1.875f, 1.99999988f}) divisors.push_back(std::ldexp(m, e));
  }
  std::mt19937 rng(3);
  for (int k = 0; k < 20; ++k) {
    uint32_t bits = (rng() & 0x7FFFu) << 16;
    float amax;
    std::memcpy(&amax, &bits, 4);
    if (!(amax > 0.0f) || !std::isfinite(amax)) continue;
    for (int s = 1; s < 127; s += 5) divisors.push_back(E4M3ToF32(s) * Nvfp4GlobalScale(amax));
  }
  int64_t n = 0, bad = 0;
  for (float d : divisors) {
    if (!Nvfp4FastDivisor(d)) continue;
    const float r = 1.0f / d, tiny = Nvfp4Tiny(d);
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint32_t u = h << 16;
      float x;
      std::memcpy(&x, &u, 4);
      if (!std::isfinite(x)) continue;
      ++n;
      const uint8_t want = F32ToE2M1(x / d);
      if (Nvfp4FastCode(x, d, r, tiny) != want && ++bad < 5) {
        ADD_FAILURE() << "x " << x << " d " << d;
      }
      if (Nvfp4OneStepDivisor(d) && Nvfp4OneStepCode(x, d, r) != want && ++bad < 5) {
        ADD_FAILURE() << "one step: x " << x << " d " << d;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(n, 40000000);
  EXPECT_TRUE(Nvfp4FastDivisor(std::ldexp(1.0f, 126)));
  EXPECT_FALSE(Nvfp4FastDivisor(std::ldexp(1.0f, 127)));
  EXPECT_FALSE(Nvfp4FastDivisor(std::ldexp(1.0f, -121)));
}

// The one-step code (exec/convert/nvfp4_math.h) for every divisor the kernels form
// in its range (every e4m3 scale times the global scale of every BF16
// amax; here every third amax) on the BF16 values nearest each E2M1 bound,
// where alone it could differ from the division, of either sign.
TEST(Nvfp4Test, OneStepCodeEqualsTheDivisionNextToEveryBound) {
  const double bounds[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  int64_t divisors = 0, bad = 0;
  for (uint32_t a = 1; a < 0x7F80; a += 3) {
    const uint32_t abits = a << 16;
    float amax;
    std::memcpy(&amax, &abits, 4);
    for (int s = 1; s < 127; ++s) {
      const float d = E4M3ToF32(s) * Nvfp4GlobalScale(amax);
      if (!Nvfp4OneStepDivisor(d)) continue;
      ++divisors;
      const float r = 1.0f / d;
      for (double t : bounds) {
        const float near = static_cast<float>(t * d);
        uint32_t nb;
        std::memcpy(&nb, &near, 4);
        for (int k = -2; k <= 2; ++k) {
          for (uint32_t sign : {0u, 0x80000000u}) {
            const uint32_t u = (((nb >> 16) + k) << 16) | sign;
            float x;
            std::memcpy(&x, &u, 4);
            if (Nvfp4OneStepCode(x, d, r) != F32ToE2M1(x / d) && ++bad < 5) {
              ADD_FAILURE() << "x " << x << " d " << d;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(divisors, 600000);
}

// The branch-free rounding equals F32ToE2M1 (which the test above checks
// against the reference) on a stride through all floats.
TEST(Nvfp4Test, BranchFreeCodeEqualsF32ToE2M1) {
  int64_t bad = 0;
  for (uint64_t v = 0; v <= 0xFFFFFFFFull; v += 977) {
    const uint32_t u = static_cast<uint32_t>(v);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    if (Nvfp4Code(f) != F32ToE2M1(f) && ++bad < 5) ADD_FAILURE() << f;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Nvfp4Test, ScalesFollowModelOpt) {
  const float g = Nvfp4GlobalScale(2688.0f);
  EXPECT_EQ(g, 2688.0f * (1.0f / 2688.0f));
  EXPECT_NE(Nvfp4GlobalScale(1.11f), 1.11f / 2688.0f);  // the reciprocal rounds
  EXPECT_EQ(E4M3ToF32(Nvfp4ScaleByte(6.0f, g)), 1.0f);   // 6 / 6
  EXPECT_EQ(E4M3ToF32(Nvfp4ScaleByte(0.0f, g)), 1.0f);   // all-zero block: 1
  EXPECT_EQ(E4M3ToF32(Nvfp4ScaleByte(2688.0f, g)), 448.0f);
  EXPECT_EQ(Nvfp4ScaleByte(1e-6f, g), 1);                // clamped to 2^-9
}

TEST(Nvfp4Test, WholeAndCutBoxesEqualTheReference) {
  const int64_t lead = 3, rows = 5, cols = 96;
  const int64_t n = lead * rows * cols;
  std::vector<float> values;
  const std::vector<uint16_t> bf16 = WideBf16(n, 11, &values);
  const testing::Quantized want = testing::ReferenceNvfp4Quantize(values, {lead, rows, cols});
  // Global amax per expert, block amax from TileAmaxHost.
  const Box box = Box::Unchecked({0, 0, 0}, {lead, rows, cols});
  const HostDenseBox in{reinterpret_cast<const char*>(bf16.data()), DType::kBF16, box};
  auto gamax = TileAmaxHost(in, {1, rows, cols});
  auto bamax = TileAmaxHost(in, {1, 1, kNvfp4Block});
  ASSERT_TRUE(gamax.ok() && bamax.ok());
  std::vector<float> g;
  for (float a : *gamax) g.push_back(Nvfp4GlobalScale(a));
  EXPECT_EQ(g, want.global_scales);
  std::vector<uint8_t> codes(n / 2), scales(n / 16);
  QuantizeNvfp4Host(in, *bamax, g, codes.data(), scales.data());
  EXPECT_EQ(codes, want.values);
  EXPECT_EQ(scales, want.scale_bytes);
  // Columns [0, 40) and [40, 96): block 2 ([32, 48)) cut; the cut block's
  // amax combined from both parts.
  const int64_t cut = 40;
  std::vector<uint8_t> got(n / 2), got_scales(n / 16);
  std::vector<std::vector<uint16_t>> dense(2);
  std::vector<Box> parts = {Box::Unchecked({0, 0, 0}, {lead, rows, cut}),
                            Box::Unchecked({0, 0, cut}, {lead, rows, cols - cut})};
  std::vector<std::vector<float>> amax(2);
  for (int p = 0; p < 2; ++p) {
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = parts[p].origin(2); c < parts[p].limit(2); ++c) {
        dense[p].push_back(bf16[r * cols + c]);
      }
    }
    auto a = TileAmaxHost({reinterpret_cast<const char*>(dense[p].data()), DType::kBF16,
                           parts[p]}, {1, 1, kNvfp4Block});
    ASSERT_TRUE(a.ok());
    amax[p] = *a;
  }
  // Part 0 holds blocks 0..2 (3 per row), part 1 blocks 2..5 (4 per row).
  for (int64_t r = 0; r < lead * rows; ++r) {
    const float m = std::fmax(amax[0][r * 3 + 2], amax[1][r * 4]);
    amax[0][r * 3 + 2] = amax[1][r * 4] = m;
  }
  for (int p = 0; p < 2; ++p) {
    const int64_t w = parts[p].shape(2);
    const Box owned = OwnedTiles(parts[p], {1, 1, kNvfp4Block});
    std::vector<uint8_t> o(lead * rows * w / 2), s(UncheckedNumElements(owned));
    QuantizeNvfp4Host({reinterpret_cast<const char*>(dense[p].data()), DType::kBF16, parts[p]},
                      amax[p], g, o.data(), s.data());
    const int64_t ow = owned.shape(2);
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = 0; c < w / 2; ++c) {
        got[r * cols / 2 + parts[p].origin(2) / 2 + c] = o[r * w / 2 + c];
      }
      for (int64_t j = 0; j < ow; ++j) got_scales[r * (cols / 16) + owned.origin(2) + j] = s[r * ow + j];
    }
  }
  EXPECT_EQ(got, want.values);
  EXPECT_EQ(got_scales, want.scale_bytes);
}

TEST(Nvfp4Test, FusedGroupAmaxOverridesTheSlice) {
  std::vector<float> values(32, 0.5f);
  const testing::Quantized own = testing::ReferenceNvfp4Quantize(values, {2, 16});
  const testing::Quantized fused = testing::ReferenceNvfp4Quantize(values, {2, 16}, {6.0f});
  EXPECT_EQ(own.global_scales[0], Nvfp4GlobalScale(0.5f));
  EXPECT_EQ(fused.global_scales[0], Nvfp4GlobalScale(6.0f));
  EXPECT_NE(own.scale_bytes, fused.scale_bytes);
}

}  // namespace
}  // namespace refit
