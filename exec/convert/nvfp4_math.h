// The per-element arithmetic of NVFP4 quantization (exec/convert/nvfp4.h), written
// once for the host and the CUDA kernels (exec/convert/cuda/nvfp4_kernels.cu,
// exec/pull/cuda/pull_nvfp4_kernels.cu) so that a CPU test can check it against
// the plain division on every BF16 value.
//
// ModelOpt's code of x is E2M1(y) with y = x / d the f32 quotient (d =
// f32(S) * g, one per 16-block). A division per element makes the kernels
// arithmetic-bound, so they divide by multiplying: with r = RN(1 / d)
// computed once per block, q0 = RN(x * r) is within 1.5 ulp of x / d, one
// Markstein step (e = x - d * q0, exact by an FMA; q = RN(q0 + e * r))
// makes it faithful and a second one correctly rounded (Markstein,
// "IA-64 and elementary functions", Theorem 8.10: r correctly rounded, q
// faithful), which is CUDA's own div.rn.f32 sequence without its range
// check. That check is replaced by one per block (Nvfp4FastDivisor,
// 2^-120 <= d <= 2^126; d <= 2^128 / 6 always) and one per element: where the
// quotient is at least 2^-100 the residuals near an E2M1 bound (|x / d|
// >= 0.2, x >= 2^-123 normal) are exact and y is nonzero (its sign is
// x's); below it the code is 0 or 8, 8 when x < 0 and y != 0, that is
// |x| / d > 2^-150 (2^-150 itself rounds to 0), decided exactly as
// |x| * 2^100 > d * 2^-50 (both exact: such a nonzero BF16 x makes
// d > 2^-34). Blocks outside that range divide. E2M1 rounding is by the
// bits, without a branch (Nvfp4Magnitude).
//
// For the divisors of realistic weights, 2^-100 <= d <= 2^16
// (Nvfp4OneStepDivisor), one Markstein step gives the code already: q1 is
// within an ulp of x / d, so it can differ from the correctly rounded
// quotient only next to an f32 midpoint, which changes the code only
// where x / d is within a few ulps of an E2M1 bound; BF16 values are 2^-8
// apart relatively, so at most two of them lie that close to each bound,
// and for every divisor the kernels can form (f32(S) * g, S any e4m3
// scale, g from any BF16 amax: 1.87 million) those two agree with the
// division (nvfp4_test checks a third of the divisors on every run); no
// quotient of a nonzero BF16 x is then below 2^-149, so the sign is x's.
#ifndef REFIT_EXEC_CONVERT_NVFP4_MATH_H_
#define REFIT_EXEC_CONVERT_NVFP4_MATH_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define REFIT_NVFP4_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define REFIT_NVFP4_HD inline
#endif

namespace refit {

REFIT_NVFP4_HD uint32_t Nvfp4Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// IEEE f32 operations, one rounding each (the device compiler would fuse
// a product into a following addition otherwise).
REFIT_NVFP4_HD float Nvfp4Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
REFIT_NVFP4_HD float Nvfp4Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
REFIT_NVFP4_HD float Nvfp4Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
REFIT_NVFP4_HD float Nvfp4Abs(float a) {
#if defined(__CUDA_ARCH__)
  return fabsf(a);
#else
  return std::fabs(a);
#endif
}
REFIT_NVFP4_HD float Nvfp4Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The E2M1 magnitude code (0..7) of a >= 0 as exec/convert/nvfp4.cc's F32ToE2M1
// rounds it: below 1, rint(2a) read off the bits of a + 2^22 (whose ulp is
// 0.5: round to nearest even); from 1 up, one mantissa bit kept (round to
// nearest even on bit 22), (exponent << 1 | bit) - 252, at most 7.
REFIT_NVFP4_HD uint32_t Nvfp4Magnitude(float a) {
  const uint32_t small = Nvfp4Bits(Nvfp4Add(a, 4194304.0f)) - 0x4A800000u;
  const uint32_t u = Nvfp4Bits(a);
  const uint32_t v = ((u + 0x1FFFFFu + ((u >> 22) & 1u)) >> 22) - 252u;
  const uint32_t big = v < 7u ? v : 7u;
  return a < 1.0f ? small : big;
}

// The 4-bit code of y (sign bit 8 when y < 0, so -0.0 is code 0).
REFIT_NVFP4_HD uint32_t Nvfp4Code(float y) {
  return (y < 0.0f ? 8u : 0u) | Nvfp4Magnitude(Nvfp4Abs(y));
}

// Whether a block's divisor takes Nvfp4FastCode (see above).
REFIT_NVFP4_HD bool Nvfp4FastDivisor(float d) {
  return d >= 7.52316384526264e-37f /* 2^-120 */ && d <= 8.507059173023462e37f /* 2^126 */;
}

// Nvfp4Code(x / d) for a finite BF16 x, given r = RN(1 / d) and
// d_tiny = d * 2^-50 of a divisor with Nvfp4FastDivisor(d).
REFIT_NVFP4_HD uint32_t Nvfp4FastCode(float x, float d, float r, float d_tiny) {
  const float q0 = Nvfp4Mul(x, r);
  const float q1 = Nvfp4Fma(Nvfp4Fma(-d, q0, x), r, q0);
  const float q2 = Nvfp4Fma(Nvfp4Fma(-d, q1, x), r, q1);
  const float a = Nvfp4Abs(q2);
  bool neg = Nvfp4Bits(x) > 0x80000000u;  // x < 0, not -0
  if (a < 7.888609052210118e-31f /* 2^-100 */) {
    neg = neg && Nvfp4Mul(Nvfp4Abs(x), 1.2676506002282294e30f /* 2^100 */) > d_tiny;
  }
  return (neg ? 8u : 0u) | Nvfp4Magnitude(a);
}

// Whether a block's divisor takes Nvfp4OneStepCode (see above).
REFIT_NVFP4_HD bool Nvfp4OneStepDivisor(float d) {
  return d >= 7.888609052210118e-31f /* 2^-100 */ && d <= 65536.0f;
}

// Nvfp4Code(x / d) for a finite BF16 x, given r = RN(1 / d), where d =
// f32(S) * Nvfp4Global(amax) (S e4m3, amax BF16) and Nvfp4OneStepDivisor(d).
REFIT_NVFP4_HD uint32_t Nvfp4OneStepCode(float x, float d, float r) {
  const float q0 = Nvfp4Mul(x, r);
  const float q1 = Nvfp4Fma(Nvfp4Fma(-d, q0, x), r, q0);
  return (Nvfp4Bits(x) > 0x80000000u ? 8u : 0u) | Nvfp4Magnitude(Nvfp4Abs(q1));
}

// d * 2^-50 for Nvfp4FastCode.
REFIT_NVFP4_HD float Nvfp4Tiny(float d) { return Nvfp4Mul(d, 8.881784197001252e-16f); }

// ModelOpt's global scale amax / (6 * 448) as torch on CUDA computes it.
REFIT_NVFP4_HD float Nvfp4Global(float amax) { return Nvfp4Mul(amax, 1.0f / 2688.0f); }

// A block's scale before the e4m3 cast: block_amax / (6 * g), 1 for an
// all-zero block, at least 2^-9.
REFIT_NVFP4_HD float Nvfp4BlockScale(float block_amax, float g) {
  float s = Nvfp4Div(block_amax, Nvfp4Mul(6.0f, g));
  if (s == 0.0f) s = 1.0f;
  return s > 0.001953125f ? s : 0.001953125f;
}

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_NVFP4_MATH_H_
