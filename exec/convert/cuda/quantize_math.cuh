// The arithmetic of exec/convert/quantize.h on the device, shared by the
// conversion kernels (convert_kernels.cu) and the quantize-on-pull kernel
// (pull_quantize_kernels.cu): e4m3 values, block scales of every ScaleMode,
// E8M0 bytes, and scale stores. Bit for bit what the host loops compute.
#ifndef REFIT_EXEC_CONVERT_CUDA_QUANTIZE_MATH_CUH_
#define REFIT_EXEC_CONVERT_CUDA_QUANTIZE_MATH_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "exec/convert/cuda/convert_kernels.h"

namespace refit {
namespace cuda {

// Kept out of an anonymous namespace: nvcc hashes the source path into the
// mangling of those, which breaks reproducible objects.
__device__ inline float RefitPow2Ceil(float scale) {
  const unsigned int u = __float_as_uint(scale);
  return (u & 0x7FFFFFu) != 0 ? __uint_as_float((u & 0xFF800000u) + 0x800000u) : scale;
}

// The value of e4m3(clamp(x, -448, 448)), exactly.
__device__ inline float RefitE4M3Value(float x) {
  const __nv_fp8_storage_t q =
      __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3);
  const __half h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
  return __half2float(h);
}

// E8m0ScaleByte of exec/convert/quantize.cc: clamp(ceil(log2(max(amax, 2^-126) /
// 448)) + 127, 0, 254), the logarithm read exactly off the quotient's bits.
__device__ inline int RefitE8m0Byte(float amax) {
  const float r = __fdiv_rn(fmaxf(amax, 1.17549435e-38f), 448.0f);
  const unsigned int u = __float_as_uint(r);
  const int e = static_cast<int>(u >> 23);
  const unsigned int m = u & 0x7FFFFFu;
  int c;  // ceil(log2(r))
  if (e > 0) {
    c = e - 127 + (m != 0 ? 1 : 0);
  } else {  // subnormal: r = m * 2^-149, m >= 1
    c = (m > 1 ? 32 - __clz(m - 1) : 0) - 149;
  }
  return min(254, max(0, c + 127));
}

// 2^(e - 127) for an E8M0 byte (2^-127 is subnormal).
__device__ inline float RefitE8m0Value(int e) {
  return e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<unsigned>(e) << 23);
}

// The modes whose codes are requantized (kPow2Requant and its byte form).
__host__ __device__ inline bool RefitRequants(int mode) {
  return mode == kScaleRequant || mode == kScaleRequantE8m0;
}

// BlockScale of exec/convert/quantize.cc: the scale a tile is quantized with.
__device__ inline float RefitBlockScale(float amax, int mode) {
  if (mode == kScaleE8m0) return RefitE8m0Value(RefitE8m0Byte(amax));
  const float s1 = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
  if (mode == kScaleFloat) return s1;
  if (mode == kScalePow2) return RefitPow2Ceil(s1);
  const float amax2 = __fmul_rn(RefitE4M3Value(__fmul_rn(amax, __fdiv_rn(1.0f, s1))), s1);
  return RefitPow2Ceil(__fdiv_rn(fmaxf(amax2, 1e-4f), 448.0f));
}

// Per tile: codes are e4m3(clamp(RefitScaled(x))).
struct RefitTileScales {
  float scale;  // written to the scale tensor
  float inv;    // 1 / the scale x is first divided by (s1 for requant)
  float s1, inv2;
};
__device__ inline RefitTileScales RefitScalesOf(float amax, int mode) {
  RefitTileScales t;
  t.scale = RefitBlockScale(amax, mode);
  t.s1 = RefitRequants(mode) ? RefitBlockScale(amax, kScaleFloat) : t.scale;
  t.inv = __fdiv_rn(1.0f, t.s1);
  t.inv2 = __fdiv_rn(1.0f, t.scale);
  return t;
}
__device__ inline float RefitScaled(float v, const RefitTileScales& t, int mode) {
  const float x = __fmul_rn(v, t.inv);
  if (!RefitRequants(mode)) return x;
  return __fmul_rn(__fmul_rn(RefitE4M3Value(x), t.s1), t.inv2);
}

// Writes scale element k: the f32 scale, or for kScaleE8m0 and
// kScaleRequantE8m0 its exponent byte.
__device__ inline void RefitStoreScale(void* scales, int64_t k, int mode, float scale) {
  if (mode == kScaleE8m0 || mode == kScaleRequantE8m0) {
    static_cast<unsigned char*>(scales)[k] =
        static_cast<unsigned char>((__float_as_uint(scale) >> 23) & 0xFF);
  } else {
    static_cast<float*>(scales)[k] = scale;
  }
}

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_QUANTIZE_MATH_CUH_
