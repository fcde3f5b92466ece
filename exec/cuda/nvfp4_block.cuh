// One NVFP4 16-block of BF16 on the device, shared by the quantize kernel
// (nvfp4_kernels.cu) and the quantize-on-pull kernel
// (pull_nvfp4_kernels.cu): its amax, its e4m3 scale byte and divisor, and
// its eight bytes of packed E2M1 codes, bit for bit exec/nvfp4.cc's, with
// the arithmetic of exec/nvfp4_math.h (no division per element).
#ifndef REFIT_EXEC_CUDA_NVFP4_BLOCK_CUH_
#define REFIT_EXEC_CUDA_NVFP4_BLOCK_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "exec/nvfp4_math.h"

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

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CUDA_NVFP4_BLOCK_CUH_
