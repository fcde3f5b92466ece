#include "exec/convert/nvfp4_thresholds.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/base/casts.h"
#include "exec/convert/nvfp4.h"
#include "exec/convert/quantize.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

float FromBits(uint32_t u) { return absl::bit_cast<float>(u); }

// Every finite BF16 of either sign coded by d's thresholds equals the
// division's code (F32ToE2M1 of the f32 quotient); returns the mismatches.
int64_t MismatchesFor(float d) {
  const Nvfp4Thresholds t = Nvfp4ThresholdsOf(d);
  int64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7FFFu) >= 0x7F80u) continue;  // not finite
    const uint32_t want = F32ToE2M1(FromBits(h << 16) / d);
    if (Nvfp4CodeByThresholds(h, t) != want && ++bad < 3) {
      ADD_FAILURE() << "d " << d << " x bits 0x" << std::hex << h << ": " << std::dec
                    << Nvfp4CodeByThresholds(h, t) << " != " << want;
    }
  }
  return bad;
}

// Divisors the kernels form: every e4m3 scale byte times the global scale
// of BF16 amaxes from the smallest subnormal to the largest finite.
TEST(Nvfp4ThresholdsTest, CodesEqualTheDivisionForEveryScaleByte) {
  std::vector<float> amaxes = {FromBits(0x00010000u), FromBits(0x00800000u), 1e-30f, 3e-8f,
                               0.02f, 1.0f, 2688.0f, 7.5e9f, 1e37f, FromBits(0x7F7F0000u)};
  std::mt19937 rng(5);
  for (int i = 0; i < 6; ++i) amaxes.push_back(FromBits((1 + rng() % 0x7F7Eu) << 16));
  int64_t bad = 0, divisors = 0;
  for (float amax : amaxes) {
    for (int s = 1; s < 127; ++s) {
      bad += MismatchesFor(E4M3ToF32(static_cast<uint8_t>(s)) * Nvfp4GlobalScale(amax));
      ++divisors;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(divisors, 126 * 16);
}

// Divisors outside the fast paths' ranges and the degenerate ones: zero
// (an all-zero tensor's global scale: every quotient infinite or NaN),
// subnormal, and near the largest float.
TEST(Nvfp4ThresholdsTest, CodesEqualTheDivisionForExtremeDivisors) {
  const float divisors[] = {0.0f,   FromBits(1u), FromBits(0x00400000u), 1e-40f, 1e-36f,
                            1e-30f, 65536.0f,     1e6f,                  1e30f,  3e38f};
  int64_t bad = 0;
  for (float d : divisors) bad += MismatchesFor(d);
  EXPECT_EQ(bad, 0);
}

// The thresholds are the smallest magnitudes reaching each code: a zero
// divisor codes everything 7 (threshold 0), a huge one only zeros and
// nothing negative (no finite magnitude reaches the sign).
TEST(Nvfp4ThresholdsTest, DegenerateThresholds) {
  const Nvfp4Thresholds zero = Nvfp4ThresholdsOf(0.0f);
  for (uint32_t t : zero.magnitude) EXPECT_EQ(t, 0u);
  EXPECT_EQ(zero.sign, 1u);  // -0 / 0 is NaN, not negative
  const Nvfp4Thresholds one = Nvfp4ThresholdsOf(1.0f);
  EXPECT_EQ(FromBits(one.magnitude[0] << 16), 0.25f + 1.0f / 512);  // 0.25 ties to 0
  EXPECT_EQ(FromBits(one.magnitude[1] << 16), 0.75f);               // 0.75 ties to 1.0
  EXPECT_EQ(FromBits(one.magnitude[6] << 16), 5.0f + 1.0f / 32);    // 5 ties to 4
  EXPECT_EQ(one.sign, 1u);
  const Nvfp4Thresholds huge = Nvfp4ThresholdsOf(3e38f);
  EXPECT_EQ(huge.magnitude[6], 0x7F80u);
}

}  // namespace
}  // namespace refit
