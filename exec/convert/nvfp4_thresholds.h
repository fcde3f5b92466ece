// NVFP4 codes by comparisons instead of arithmetic per element, written
// once for the host test and the CUDA kernels (exec/convert/cuda/nvfp4_block.cuh).
//
// The code of a BF16 x in a block of divisor d is Nvfp4Code(RN(x / d))
// (exec/convert/nvfp4_math.h). For one d its magnitude (0..7) is a nondecreasing
// function of |x|: the quotient rounds monotonically, and so does E2M1
// rounding. So the magnitude is the number of k in 1..7 with |x| >= T_k,
// where T_k is the smallest BF16 magnitude whose quotient by d has a
// magnitude code of at least k; and the sign bit is set exactly when
// RN(x / d) < 0, that is x <= -T_0, T_0 the smallest BF16 magnitude m with
// RN(-m / d) < 0 (quotients of smaller ones round to -0; T_0 >= 1 since
// -0 / d is never negative). A threshold of 0x7F80 (infinity) means "no
// finite magnitude": finite inputs never reach it; blocks with a
// non-finite value do not use thresholds.
//
// d = f32(S) * g takes one of 126 values per global scale g (S the e4m3
// scale byte), so a kernel builds the thresholds of all of them once per
// global scale and then codes each element with BF16 comparisons. The
// thresholds are found with the division itself (bounded steps from
// t_k * d, a binary search where those do not settle), so the codes are
// the division's bit for bit, for every d, including 0 (every quotient is
// then infinite or NaN: magnitude 7) and d outside the ranges of
// exec/convert/nvfp4_math.h's fast paths.
#ifndef REFIT_EXEC_CONVERT_NVFP4_THRESHOLDS_H_
#define REFIT_EXEC_CONVERT_NVFP4_THRESHOLDS_H_

#include <cstdint>

#include "exec/convert/nvfp4_math.h"

namespace refit {

// The f32 value of BF16 bits h.
REFIT_NVFP4_HD float Nvfp4FromBf16(uint32_t h) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(h << 16);
#else
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Whether the BF16 magnitude m (0 <= m < 0x7F80) reaches threshold k for
// divisor d: k in 1..7, its quotient's magnitude code is at least k; k = 0,
// -m / d is negative.
REFIT_NVFP4_HD bool Nvfp4Reaches(int k, uint32_t m, float d) {
  const float x = Nvfp4FromBf16(m);
  if (k == 0) return Nvfp4Div(-x, d) < 0.0f;
  return Nvfp4Magnitude(Nvfp4Abs(Nvfp4Div(x, d))) >= static_cast<uint32_t>(k);
}

// T_k for divisor d (see above): the smallest BF16 magnitude m < 0x7F80
// that reaches k, or 0x7F80 when none does.
REFIT_NVFP4_HD uint32_t Nvfp4Threshold(int k, float d) {
  // Where the E2M1 magnitude code becomes k (k >= 1), and the quotient's
  // smallest nonzero magnitude (k = 0), times d: within a few BF16 steps of
  // the threshold when d is an ordinary number.
  const float at[8] = {2.6469779601696886e-23f /* 2^-75, twice */, 0.25f, 0.75f, 1.25f, 1.75f,
                       2.5f, 3.5f, 5.0f};
  float guess = Nvfp4Mul(Nvfp4Abs(d), at[k]);
  if (k == 0) guess = Nvfp4Mul(guess, at[0]);
  uint32_t m = Nvfp4Bits(guess) >> 16;
  if (!(guess < 3.3895313892515355e38f)) m = 0x7F80u;  // also NaN
  const auto reaches = [&](uint32_t v) { return v >= 0x7F80u || Nvfp4Reaches(k, v, d); };
  uint32_t lo = 0, hi = 0x7F80u;  // reaches(hi); !reaches(v) for v < lo
  if (reaches(m)) {
    hi = m;
    for (int step = 0; step < 4 && hi > 0; ++step) {
      if (!reaches(hi - 1)) return hi;
      --hi;
    }
    if (hi == 0) return 0;
  } else {
    lo = m + 1;
    for (int step = 0; step < 4; ++step) {
      if (reaches(lo)) return lo;
      ++lo;
    }
  }
  while (lo < hi) {  // the smallest v in [lo, hi] that reaches
    const uint32_t mid = lo + (hi - lo) / 2;
    if (reaches(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

// The thresholds of one divisor: magnitude[k - 1] = T_k, sign = T_0.
struct Nvfp4Thresholds {
  uint32_t magnitude[7];
  uint32_t sign;
};

REFIT_NVFP4_HD Nvfp4Thresholds Nvfp4ThresholdsOf(float d) {
  Nvfp4Thresholds t;
  for (int k = 1; k <= 7; ++k) t.magnitude[k - 1] = Nvfp4Threshold(k, d);
  t.sign = Nvfp4Threshold(0, d);
  return t;
}

// The 4-bit code of the finite BF16 x (bits) from its block's thresholds:
// what the kernels compute with packed BF16 comparisons.
REFIT_NVFP4_HD uint32_t Nvfp4CodeByThresholds(uint32_t x, const Nvfp4Thresholds& t) {
  const uint32_t a = x & 0x7FFFu;
  uint32_t code = 0;
  for (int k = 0; k < 7; ++k) code += a >= t.magnitude[k] ? 1u : 0u;
  return code | ((x & 0x8000u) != 0 && a >= t.sign ? 8u : 0u);
}

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_NVFP4_THRESHOLDS_H_
