// One NVFP4 16-block of BF16 on the device, shared by the quantize kernel
// (nvfp4_kernels.cu) and the quantize-on-pull kernel
// (pull_nvfp4_kernels.cu): its amax, its e4m3 scale byte and divisor, and
// its eight bytes of packed E2M1 codes, bit for bit exec/convert/nvfp4.cc's, with
// the arithmetic of exec/convert/nvfp4_math.h (no division per element).
#ifndef REFIT_EXEC_CONVERT_CUDA_NVFP4_BLOCK_CUH_
#define REFIT_EXEC_CONVERT_CUDA_NVFP4_BLOCK_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "exec/convert/nvfp4_math.h"
#include "exec/convert/nvfp4_thresholds.h"

namespace refit {
namespace cuda {

// Kept out of an anonymous namespace (reproducible objects).

// max |x| over the 16 BF16 of a and b as f32 bits (non-negative floats
// order as unsigned ints); at least 0x7F800000 when one is not finite.
__device__ __forceinline__ unsigned int RefitNvfp4AbsMaxBits(const uint4& a, const uint4& b) {
  const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  unsigned int m = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const unsigned int v = w[i] & 0x7FFF7FFFu;
    m = max(m, max(v << 16, v & 0xFFFF0000u));
  }
  return m;
}

// The block's e4m3 scale byte S for block amax `amax` and global scale g
// (Nvfp4ScaleByte), and *d = f32(S) * g, what its values are divided by.
__device__ __forceinline__ unsigned int RefitNvfp4Scale(float amax, float g, float* d) {
  const __nv_fp8_storage_t sb =
      __nv_cvt_float_to_fp8(Nvfp4BlockScale(amax, g), __NV_SATFINITE, __NV_E4M3);
  *d = __fmul_rn(__half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3))), g);
  return sb;
}

// The packed codes of the 16 values of a and b divided by d: byte j holds
// element 2j in its low nibble. kPath 1: Nvfp4OneStepCode, 2:
// Nvfp4FastCode, 0: the division.
template <int kPath>
__device__ __forceinline__ uint2 RefitNvfp4Pack(const uint4& a, const uint4& b, float d, float r,
                                                float tiny) {
  const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  unsigned int p[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float x0 = __uint_as_float(w[i] << 16), x1 = __uint_as_float(w[i] & 0xFFFF0000u);
    unsigned int c0, c1;
    if (kPath == 1) {
      c0 = Nvfp4OneStepCode(x0, d, r);
      c1 = Nvfp4OneStepCode(x1, d, r);
    } else if (kPath == 2) {
      c0 = Nvfp4FastCode(x0, d, r, tiny);
      c1 = Nvfp4FastCode(x1, d, r, tiny);
    } else {
      c0 = Nvfp4Code(__fdiv_rn(x0, d));
      c1 = Nvfp4Code(__fdiv_rn(x1, d));
    }
    p[i / 4] |= (c0 | c1 << 4) << (8 * (i % 4));
  }
  return make_uint2(p[0], p[1]);
}

__device__ __forceinline__ uint2 RefitNvfp4Codes(const uint4& a, const uint4& b, float d) {
  if (Nvfp4OneStepDivisor(d)) return RefitNvfp4Pack<1>(a, b, d, __frcp_rn(d), 0.0f);
  if (Nvfp4FastDivisor(d)) return RefitNvfp4Pack<2>(a, b, d, __frcp_rn(d), Nvfp4Tiny(d));
  return RefitNvfp4Pack<0>(a, b, d, 0.0f, 0.0f);
}

// Coding by thresholds (exec/convert/nvfp4_thresholds.h) with packed BF16
// comparisons (sm_90: set.*.bf16x2, max.NaN.bf16x2).

// The table of one global scale g: for every e4m3 scale byte S < 127, at
// 8 * S the eight BF16 magnitudes T_1..T_7 of d = f32(S) * g, then -T_0
// (its sign bit set): one 16-byte entry per S. Built by the whole thread
// block (into shared or global memory); the caller synchronizes after.
constexpr int kRefitNvfp4TableEntries = 128;

__device__ __forceinline__ void RefitNvfp4BuildTable(float g, unsigned short* table) {
  for (int i = threadIdx.x; i < 8 * 127; i += blockDim.x) {
    const unsigned int s = static_cast<unsigned int>(i) >> 3, k = i & 7;
    const float d = __fmul_rn(
        __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(s),
                                                     __NV_E4M3))),
        g);
    table[i] = static_cast<unsigned short>(k < 7 ? Nvfp4Threshold(static_cast<int>(k) + 1, d)
                                                 : Nvfp4Threshold(0, d) | 0x8000u);
  }
}

__device__ __forceinline__ unsigned int RefitBf16x2Ge(unsigned int a, unsigned int b) {
  unsigned int m;
  asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
}

__device__ __forceinline__ unsigned int RefitBf16x2Le(unsigned int a, unsigned int b) {
  unsigned int m;
  asm("set.le.u32.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
}

__device__ __forceinline__ unsigned int RefitBf16x2MaxNaN(unsigned int a, unsigned int b) {
  unsigned int m;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
}

// The f32 bits of the block's max |x| (bits of a NaN or infinity, at least
// 0x7F800000, when a value is not finite; the bits of a finite block are
// RefitNvfp4AbsMaxBits'), from the BF16 magnitudes a[8].
__device__ __forceinline__ unsigned int RefitNvfp4AbsMaxPacked(const unsigned int (&a)[8]) {
  unsigned int m = RefitBf16x2MaxNaN(RefitBf16x2MaxNaN(a[0], a[1]), RefitBf16x2MaxNaN(a[2], a[3]));
  m = RefitBf16x2MaxNaN(m, RefitBf16x2MaxNaN(RefitBf16x2MaxNaN(a[4], a[5]),
                                             RefitBf16x2MaxNaN(a[6], a[7])));
  return max(m << 16, m & 0xFFFF0000u);
}

// The codes of the two BF16 in w (magnitudes a = w & 0x7FFF7FFF) from the
// thresholds t = T_1..T_4 and u = T_5..T_7, -T_0, each in both halves of
// its word: element 0's code in bits 0-3, element 1's in bits 20-23.
// Magnitude by a binary search over the thresholds (three comparisons),
// each half choosing its own next one.
__device__ __forceinline__ unsigned int RefitNvfp4PairCodes(unsigned int w, unsigned int a,
                                                            const uint4& t, const uint4& u) {
  const unsigned int m4 = RefitBf16x2Ge(a, t.w);
  const unsigned int t2 = (u.y & m4) | (t.y & ~m4);  // T_6 or T_2
  const unsigned int m2 = RefitBf16x2Ge(a, t2);
  const unsigned int hi = (u.z & m2) | (u.x & ~m2);  // T_7 or T_5
  const unsigned int lo = (t.z & m2) | (t.x & ~m2);  // T_3 or T_1
  const unsigned int m1 = RefitBf16x2Ge(a, (hi & m4) | (lo & ~m4));
  const unsigned int neg = RefitBf16x2Le(w, u.w);
  return (m4 & 0x00400004u) | (m2 & 0x00200002u) | (m1 & 0x00100001u) | (neg & 0x00800008u);
}

// The packed codes of a 16-block (RefitNvfp4Codes' bytes) whose values are
// finite, from its scale byte's table entry e (RefitNvfp4BuildTable).
__device__ __forceinline__ uint2 RefitNvfp4CodesByTable(const uint4& q0, const uint4& q1,
                                                        const unsigned int (&a)[8],
                                                        const uint4& e) {
  const uint4 t = make_uint4(__byte_perm(e.x, 0, 0x1010), __byte_perm(e.x, 0, 0x3232),
                             __byte_perm(e.y, 0, 0x1010), __byte_perm(e.y, 0, 0x3232));
  const uint4 u = make_uint4(__byte_perm(e.z, 0, 0x1010), __byte_perm(e.z, 0, 0x3232),
                             __byte_perm(e.w, 0, 0x1010), __byte_perm(e.w, 0, 0x3232));
  const unsigned int w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  unsigned int c[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) c[i] = RefitNvfp4PairCodes(w[i], a[i], t, u);
  // x = c0 | c1 << 8 holds bytes (lo0, lo1, hi0, hi1); byte j of the result
  // is element 2j's code | element 2j + 1's << 4.
  unsigned int r[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const unsigned int x = c[4 * h] | c[4 * h + 1] << 8, y = c[4 * h + 2] | c[4 * h + 3] << 8;
    r[h] = __byte_perm(x, y, 0x5410) | __byte_perm(x, y, 0x7632);
  }
  return make_uint2(r[0], r[1]);
}

// The magnitudes of a 16-block's eight words.
__device__ __forceinline__ void RefitNvfp4Magnitudes(const uint4& q0, const uint4& q1,
                                                     unsigned int (&a)[8]) {
  a[0] = q0.x & 0x7FFF7FFFu;
  a[1] = q0.y & 0x7FFF7FFFu;
  a[2] = q0.z & 0x7FFF7FFFu;
  a[3] = q0.w & 0x7FFF7FFFu;
  a[4] = q1.x & 0x7FFF7FFFu;
  a[5] = q1.y & 0x7FFF7FFFu;
  a[6] = q1.z & 0x7FFF7FFFu;
  a[7] = q1.w & 0x7FFF7FFFu;
}

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_NVFP4_BLOCK_CUH_
