// CUDA conversion kernels (see convert_kernels.h).
#include "exec/cuda/convert_kernels.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace refit {
namespace cuda {

// Kept out of an anonymous namespace: nvcc hashes the source path into the
// mangling of those, which breaks reproducible objects.
__device__ float RefitLoadF32(const char* p, int dtype, int64_t i) {
  if (dtype == kConvertBF16) {
    const unsigned short h = reinterpret_cast<const unsigned short*>(p)[i];
    return __uint_as_float(static_cast<unsigned int>(h) << 16);
  }
  if (dtype == kConvertF16) return __half2float(reinterpret_cast<const __half*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}

__device__ float RefitPow2Ceil(float scale) {
  const unsigned int u = __float_as_uint(scale);
  return (u & 0x7FFFFFu) != 0 ? __uint_as_float((u & 0xFF800000u) + 0x800000u) : scale;
}

// The value of e4m3(clamp(x, -448, 448)), exactly.
__device__ float RefitE4M3Value(float x) {
  const __nv_fp8_storage_t q =
      __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3);
  const __half h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
  return __half2float(h);
}

// E8m0ScaleByte of exec/quantize.cc: clamp(ceil(log2(max(amax, 2^-126) /
// 448)) + 127, 0, 254), the logarithm read exactly off the quotient's bits.
__device__ int RefitE8m0Byte(float amax) {
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
__device__ float RefitE8m0Value(int e) {
  return e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<unsigned>(e) << 23);
}

// BlockScale of exec/quantize.cc: the scale a tile is quantized with.
__device__ float RefitBlockScale(float amax, int mode) {
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
__device__ RefitTileScales RefitScalesOf(float amax, int mode) {
  RefitTileScales t;
  t.scale = RefitBlockScale(amax, mode);
  t.s1 = mode == kScaleRequant ? RefitBlockScale(amax, kScaleFloat) : t.scale;
  t.inv = __fdiv_rn(1.0f, t.s1);
  t.inv2 = __fdiv_rn(1.0f, t.scale);
  return t;
}
__device__ float RefitScaled(float v, const RefitTileScales& t, int mode) {
  const float x = __fmul_rn(v, t.inv);
  if (mode != kScaleRequant) return x;
  return __fmul_rn(__fmul_rn(RefitE4M3Value(x), t.s1), t.inv2);
}

// Writes scale element k: the f32 scale, or for kScaleE8m0 its byte.
__device__ void RefitStoreScale(void* scales, int64_t k, int mode, float scale) {
  if (mode == kScaleE8m0) {
    static_cast<unsigned char*>(scales)[k] =
        static_cast<unsigned char>((__float_as_uint(scale) >> 23) & 0xFF);
  } else {
    static_cast<float*>(scales)[k] = scale;
  }
}

// One block per tile: (l, i, j) = (blockIdx.z, blockIdx.y, blockIdx.x).
__global__ void RefitTileAmaxKernel(DenseBox b, int64_t tr0, int64_t tc0,
                                    float* amax, long long* bad) {
  const int64_t l = blockIdx.z, ti = tr0 + blockIdx.y, tj = tc0 + blockIdx.x;
  const int64_t rb = max(ti * b.block_r, b.r0) - b.r0;
  const int64_t re = min((ti + 1) * b.block_r, b.r0 + b.R) - b.r0;
  const int64_t cb = max(tj * b.block_c, b.c0) - b.c0;
  const int64_t ce = min((tj + 1) * b.block_c, b.c0 + b.C) - b.c0;
  const int64_t w = ce - cb, n = (re - rb) * w;
  float m = 0.0f;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const int64_t idx = (l * b.R + rb + k / w) * b.C + cb + k % w;
    const float v = RefitLoadF32(b.data, b.dtype, idx);
    if (!isfinite(v)) atomicMin(bad, static_cast<long long>(idx));
    m = fmaxf(m, fabsf(v));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned int w2 = 1; w2 < blockDim.x / 32; ++w2) m = fmaxf(m, warp_max[w2]);
    amax[(l * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = m;
  }
}

__global__ void RefitQuantizeKernel(DenseBox b, int64_t tr0, int64_t tc0,
                                    const float* amax, int mode, unsigned char* out,
                                    void* scales, int64_t otr0, int64_t otc0,
                                    int64_t otr, int64_t otc) {
  const int64_t l = blockIdx.z, ti = tr0 + blockIdx.y, tj = tc0 + blockIdx.x;
  const float a = amax[(l * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x];
  const RefitTileScales ts = RefitScalesOf(a, mode);
  const float scale = ts.scale;
  const int64_t rb = max(ti * b.block_r, b.r0) - b.r0;
  const int64_t re = min((ti + 1) * b.block_r, b.r0 + b.R) - b.r0;
  const int64_t cb = max(tj * b.block_c, b.c0) - b.c0;
  const int64_t ce = min((tj + 1) * b.block_c, b.c0 + b.C) - b.c0;
  const int64_t w = ce - cb, n = (re - rb) * w;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const int64_t idx = (l * b.R + rb + k / w) * b.C + cb + k % w;
    const float x = RefitScaled(RefitLoadF32(b.data, b.dtype, idx), ts, mode);
    out[idx] = static_cast<unsigned char>(
        __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3));
  }
  if (threadIdx.x == 0 && scales != nullptr && ti >= otr0 && ti < otr0 + otr &&
      tj >= otc0 && tj < otc0 + otc) {
    RefitStoreScale(scales, (l * otr + (ti - otr0)) * otc + (tj - otc0), mode, scale);
  }
}

// Amax and quantization of one tile in one pass (tiles no other rank holds
// part of): each thread keeps its elements in registers.
constexpr int kFusedThreads = 512;
constexpr int kFusedPerThread = 32;  // 512 * 32 = one 128 x 128 tile

__global__ void __launch_bounds__(kFusedThreads) RefitQuantizeFusedKernel(
    DenseBox b, int64_t tr0, int64_t tc0, int mode, unsigned char* out, void* scales,
    int64_t otr0, int64_t otc0, int64_t otr, int64_t otc, long long* bad) {
  const int64_t l = blockIdx.z, ti = tr0 + blockIdx.y, tj = tc0 + blockIdx.x;
  const int64_t rb = max(ti * b.block_r, b.r0) - b.r0;
  const int64_t re = min((ti + 1) * b.block_r, b.r0 + b.R) - b.r0;
  const int64_t cb = max(tj * b.block_c, b.c0) - b.c0;
  const int64_t ce = min((tj + 1) * b.block_c, b.c0 + b.C) - b.c0;
  const int w = static_cast<int>(ce - cb), n = static_cast<int>((re - rb) * (ce - cb));
  const int64_t base = (l * b.R + rb) * b.C + cb;
  float v[kFusedPerThread];
  float m = 0.0f;
#pragma unroll
  for (int q = 0; q < kFusedPerThread; ++q) {
    const int k = q * kFusedThreads + threadIdx.x;
    v[q] = 0.0f;
    if (k < n) {
      const int64_t idx = base + static_cast<int64_t>(k / w) * b.C + k % w;
      v[q] = RefitLoadF32(b.data, b.dtype, idx);
      if (!isfinite(v[q])) atomicMin(bad, static_cast<long long>(idx));
      m = fmaxf(m, fabsf(v[q]));
    }
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kFusedThreads / 32];
  __shared__ float tile_amax;
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w2 = 1; w2 < kFusedThreads / 32; ++w2) m = fmaxf(m, warp_max[w2]);
    tile_amax = m;
  }
  __syncthreads();
  const RefitTileScales ts = RefitScalesOf(tile_amax, mode);
  if (threadIdx.x == 0 && scales != nullptr && ti >= otr0 && ti < otr0 + otr && tj >= otc0 &&
      tj < otc0 + otc) {
    RefitStoreScale(scales, (l * otr + (ti - otr0)) * otc + (tj - otc0), mode, ts.scale);
  }
#pragma unroll
  for (int q = 0; q < kFusedPerThread; ++q) {
    const int k = q * kFusedThreads + threadIdx.x;
    if (k < n) {
      const int64_t idx = base + static_cast<int64_t>(k / w) * b.C + k % w;
      const float x = RefitScaled(v[q], ts, mode);
      out[idx] = static_cast<unsigned char>(
          __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3));
    }
  }
}

// The fused quantizer for BF16 rows that are 16-byte aligned, 128 x 128
// tiles: 128 threads per tile, 16 per row, each loading 8 elements (16
// bytes) of 16 rows and storing 8 e4m3 bytes per row. Every load is in
// flight before the first use; one barrier per tile (each thread reduces
// the 4 warps' maxima itself). Measured on an H200: reads and writes at
// about the speed of a device copy (convert_gpu_test).
constexpr int kVecThreads = 128;
constexpr int kVecRows = kVecThreads / 16;  // rows per pass
constexpr int kVecPasses = 128 / kVecRows;

__global__ void __launch_bounds__(kVecThreads) RefitQuantizeBf16x8Kernel(
    DenseBox b, int64_t tr0, int64_t tc0, int mode, unsigned char* out, void* scales,
    int64_t otr0, int64_t otc0, int64_t otr, int64_t otc, long long* bad) {
  const int64_t l = blockIdx.z, ti = tr0 + blockIdx.y, tj = tc0 + blockIdx.x;
  const int64_t rb = max(ti * 128, b.r0) - b.r0;
  const int64_t re = min((ti + 1) * 128, b.r0 + b.R) - b.r0;
  const int64_t cb = max(tj * 128, b.c0) - b.c0;
  const int64_t ce = min((tj + 1) * 128, b.c0 + b.C) - b.c0;
  const int64_t col = cb + (threadIdx.x & 15) * 8;
  const bool on = col < ce;
  const int row0 = threadIdx.x >> 4;
  const unsigned short* base = reinterpret_cast<const unsigned short*>(b.data);
  uint4 v[kVecPasses];
#pragma unroll
  for (int k = 0; k < kVecPasses; ++k) {
    const int64_t r = rb + row0 + kVecRows * k;
    v[k] = make_uint4(0, 0, 0, 0);
    if (on && r < re) v[k] = *reinterpret_cast<const uint4*>(base + (l * b.R + r) * b.C + col);
  }
  // The max of |x| as f32 bits (non-negative floats order as unsigned ints).
  unsigned int m = 0;
#pragma unroll
  for (int k = 0; k < kVecPasses; ++k) {
    const unsigned int w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      m = max(m, max((w[q] << 16) & 0x7FFF0000u, w[q] & 0x7FFF0000u));
      // An all-ones exponent in either half: NaN or infinity (rare path).
      if ((w[q] & 0x7F80u) == 0x7F80u || (w[q] & 0x7F800000u) == 0x7F800000u) {
        const int half = (w[q] & 0x7F80u) == 0x7F80u ? 0 : 1;
        const int64_t idx = (l * b.R + rb + row0 + kVecRows * k) * b.C + col;
        atomicMin(bad, static_cast<long long>(idx + 2 * q + half));
      }
    }
  }
  m = __reduce_max_sync(0xffffffffu, m);
  __shared__ unsigned int warp_max[kVecThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
#pragma unroll
  for (int w2 = 0; w2 < kVecThreads / 32; ++w2) m = max(m, warp_max[w2]);
  // kScaleFloat or kScalePow2 only (requant takes the fused kernel).
  const float tile_scale = RefitBlockScale(__uint_as_float(m), mode);
  if (threadIdx.x == 0 && scales != nullptr && ti >= otr0 && ti < otr0 + otr && tj >= otc0 &&
      tj < otc0 + otc) {
    RefitStoreScale(scales, (l * otr + (ti - otr0)) * otc + (tj - otc0), mode, tile_scale);
  }
  const float inv = __fdiv_rn(1.0f, tile_scale);
#pragma unroll
  for (int k = 0; k < kVecPasses; ++k) {
    const int64_t r = rb + row0 + kVecRows * k;
    if (!on || r >= re) continue;
    const unsigned int w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
    unsigned int packed[2] = {0, 0};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Finite inputs only (checked above): SATFINITE saturates at +-448
      // exactly as clamping first would.
      const float2 y = make_float2(__fmul_rn(__uint_as_float(w[q] << 16), inv),
                                   __fmul_rn(__uint_as_float(w[q] & 0xFFFF0000u), inv));
      const unsigned int two = static_cast<unsigned short>(
          __nv_cvt_float2_to_fp8x2(y, __NV_SATFINITE, __NV_E4M3));
      packed[q >> 1] |= two << (16 * (q & 1));
    }
    *reinterpret_cast<uint2*>(out + (l * b.R + r) * b.C + col) = make_uint2(packed[0], packed[1]);
  }
}

// 1 x 32 blocks (MXFP8), none cut by the box: one warp per block, lane i
// holding column i of it; blocks numbered row-major over (l, row, block
// column), kMxWarps per thread block. The box's block columns all lie
// wholly in it (its column origin and extent are multiples of 32 or the
// block is the tensor's last, partial one).
constexpr int kMxWarpBlock = 32;
constexpr int kMxWarps = 8;

__global__ void __launch_bounds__(kMxWarps * 32) RefitQuantizeMxKernel(
    DenseBox b, int mode, unsigned char* out, void* scales, long long* bad) {
  const int64_t tc = (b.C + kMxWarpBlock - 1) / kMxWarpBlock;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kMxWarps + (threadIdx.x >> 5);
  if (blk >= b.L * b.R * tc) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const int64_t row = blk / tc, j = blk % tc;  // row over (l, r)
  const int64_t col = j * kMxWarpBlock + lane;
  const bool on = col < b.C;
  const int64_t idx = row * b.C + col;
  float v = on ? RefitLoadF32(b.data, b.dtype, idx) : 0.0f;
  if (on && !isfinite(v)) atomicMin(bad, static_cast<long long>(idx));
  float m = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float scale = RefitBlockScale(m, mode);
  if (lane == 0 && scales != nullptr) RefitStoreScale(scales, blk, mode, scale);
  if (!on) return;
  const float x = __fmul_rn(v, __fdiv_rn(1.0f, scale));
  out[idx] = static_cast<unsigned char>(
      __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3));
}

// 1 x 32 blocks (MXFP8) of BF16 rows made of whole blocks (the box's
// columns a multiple of 32), input 16-byte and codes 8-byte aligned: the
// box is a run of 64-byte blocks numbered like their scales. Each lane
// holds 8 elements (one 16-byte load), four lanes one block (two shuffles
// give its amax); a warp's k-th load reads 512 consecutive bytes and each
// thread has kMxVecLoads loads in flight before the first use; codes go
// out as 8-byte stores, the block's scale byte from its first lane. Codes
// and bytes are those of RefitQuantizeMxKernel (same scale and product).
constexpr int kMxVecThreads = 256;
constexpr int kMxVecLoads = 4;
constexpr int64_t kMxVecChunksPerCta = int64_t{kMxVecThreads} * kMxVecLoads;

__global__ void __launch_bounds__(kMxVecThreads) RefitQuantizeMxBf16x8Kernel(
    const uint4* in, int64_t chunks, uint2* out, unsigned char* scales, long long* bad) {
  const int lane = threadIdx.x & 31;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kMxVecChunksPerCta +
                       static_cast<int64_t>(threadIdx.x >> 5) * (32 * kMxVecLoads) + lane;
  uint4 v[kMxVecLoads];
#pragma unroll
  for (int k = 0; k < kMxVecLoads; ++k) {
    const int64_t c = base + 32 * k;
    v[k] = c < chunks ? __ldg(in + c) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < kMxVecLoads; ++k) {
    const int64_t c = base + 32 * k;
    const unsigned int w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
    // The max of |x| as f32 bits (non-negative floats order as unsigned ints).
    unsigned int m = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      m = max(m, max((w[q] << 16) & 0x7FFF0000u, w[q] & 0x7FFF0000u));
      // An all-ones exponent in either half: NaN or infinity (rare path).
      if ((w[q] & 0x7F80u) == 0x7F80u || (w[q] & 0x7F800000u) == 0x7F800000u) {
        const int half = (w[q] & 0x7F80u) == 0x7F80u ? 0 : 1;
        atomicMin(bad, static_cast<long long>(c * 8 + 2 * q + half));
      }
    }
    // Every lane takes part (out-of-range lanes hold zeros); whole blocks
    // of four lanes are in or out together (chunks % 4 == 0).
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
    if (c >= chunks) continue;
    const int byte = RefitE8m0Byte(__uint_as_float(m));
    if ((lane & 3) == 0 && scales != nullptr) {
      scales[c >> 2] = static_cast<unsigned char>(byte);
    }
    const float inv = __fdiv_rn(1.0f, RefitE8m0Value(byte));
    unsigned int packed[2] = {0, 0};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Finite inputs only (checked above): SATFINITE saturates at +-448
      // exactly as clamping first would.
      const float2 y = make_float2(__fmul_rn(__uint_as_float(w[q] << 16), inv),
                                   __fmul_rn(__uint_as_float(w[q] & 0xFFFF0000u), inv));
      const unsigned int two = static_cast<unsigned short>(
          __nv_cvt_float2_to_fp8x2(y, __NV_SATFINITE, __NV_E4M3));
      packed[q >> 1] |= two << (16 * (q & 1));
    }
    out[c] = make_uint2(packed[0], packed[1]);
  }
}

// Quantize-on-pull (see the header). The 16-byte path: thread t holds 8
// columns (t & 15) of rows t / 16 + (kThreads / 16) k, all its loads in
// flight before the first use; 128 x 128 tiles reduce their amax over the
// block, 1 x 32 blocks over the four lanes holding them. Two launch shapes:
// a thread block per item, or a persistent grid whose blocks walk the items,
// each loading its next item's description while it works on the current
// one (the description's load is then off the critical path).
constexpr int kPullQuantMaxThreads = 256;

__device__ void RefitPullQuantStoreCodes(const PullQuantItem& it, int r, int c0, uint4 v,
                                         float inv) {
  if (it.dst == nullptr || r < it.w_r0 || r >= it.w_r1) return;
  const int lo = max(c0, it.w_c0), hi = min(c0 + 8, it.w_c1);
  if (lo >= hi) return;
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
  unsigned int p0 = 0, p1 = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // Finite inputs only: SATFINITE saturates at +-448 as clamping would.
    const float2 y = make_float2(__fmul_rn(__uint_as_float(w[q] << 16), inv),
                                 __fmul_rn(__uint_as_float(w[q] & 0xFFFF0000u), inv));
    const unsigned int two = static_cast<unsigned short>(
        __nv_cvt_float2_to_fp8x2(y, __NV_SATFINITE, __NV_E4M3));
    if (q < 2) {
      p0 |= two << (16 * q);
    } else {
      p1 |= two << (16 * (q - 2));
    }
  }
  unsigned char* out = it.dst + (r - it.w_r0) * it.dst_pitch + (c0 - it.w_c0);
  if (lo == c0 && hi == c0 + 8 && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    *reinterpret_cast<uint2*>(out) = make_uint2(p0, p1);
    return;
  }
  for (int c = lo; c < hi; ++c) {
    const int k = c - c0;
    out[k] = ((k < 4 ? p0 : p1) >> (8 * (k & 3))) & 0xFF;
  }
}

__device__ void RefitPullQuantStoreScale(const PullQuantItem& it, int i, int j, float scale) {
  if (it.scales == nullptr || i < it.s_r0 || i >= it.s_r1 || j < it.s_c0 || j >= it.s_c1) return;
  RefitStoreScale(it.scales, (i - it.s_r0) * it.scale_pitch + (j - it.s_c0), it.mode, scale);
}

// 1 / 2^(e - 127) for an E8M0 byte, exactly (the product with it is the
// quotient by the scale, as RefitQuantizeMxKernel computes it).
__device__ float RefitE8m0Inverse(int e) {
  return e == 254 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<unsigned>(254 - e) << 23);
}

// The max of |x| over the 8 BF16 of v as f32 bits (non-negative floats
// order as unsigned ints); *nonfinite set for a NaN or infinity.
__device__ unsigned int RefitAbsMaxBits(uint4 v, bool* nonfinite) {
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
  unsigned int m = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    m = max(m, max((w[q] << 16) & 0x7FFF0000u, w[q] & 0x7FFF0000u));
    *nonfinite |= (w[q] & 0x7F80u) == 0x7F80u || (w[q] & 0x7F800000u) == 0x7F800000u;
  }
  return m;
}

template <int kThreads>
__device__ void RefitPullQuantVector(const PullQuantItem& it, long long index, long long* bad,
                                     unsigned int* warp_max) {
  constexpr int kRows = kThreads / 16;   // rows per pass
  constexpr int kLoads = 128 / kRows;    // passes
  const int g = threadIdx.x & 15, r0 = threadIdx.x >> 4;
  const int c0 = g * 8;
  const bool on = c0 < it.cols;
  const char* src = it.src;
  const int64_t pitch = it.src_pitch, rows = it.rows;
  uint4 v[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int r = r0 + kRows * k;
    v[k] = make_uint4(0, 0, 0, 0);
    if (on && r < rows) v[k] = __ldg(reinterpret_cast<const uint4*>(src + 2 * (r * pitch + c0)));
  }
  bool nonfinite = false;
  if (it.tile_r == 1) {  // 1 x 32 blocks: four lanes each
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      unsigned int b = RefitAbsMaxBits(v[k], &nonfinite);
      b = max(b, __shfl_xor_sync(0xffffffffu, b, 1));
      b = max(b, __shfl_xor_sync(0xffffffffu, b, 2));
      const int r = r0 + kRows * k;
      if (!on || r >= rows) continue;
      float scale, inv;
      if (it.mode == kScaleE8m0) {
        const int e = RefitE8m0Byte(__uint_as_float(b));
        scale = RefitE8m0Value(e);
        inv = RefitE8m0Inverse(e);
      } else {
        scale = RefitBlockScale(__uint_as_float(b), it.mode);
        inv = __fdiv_rn(1.0f, scale);
      }
      if ((g & 3) == 0) RefitPullQuantStoreScale(it, r, g >> 2, scale);
      RefitPullQuantStoreCodes(it, r, c0, v[k], inv);
    }
    if (nonfinite) atomicMin(bad, index);
    return;
  }
  unsigned int b = 0;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) b = max(b, RefitAbsMaxBits(v[k], &nonfinite));
  if (nonfinite) atomicMin(bad, index);
  b = __reduce_max_sync(0xffffffffu, b);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = b;
  __syncthreads();
#pragma unroll
  for (int w2 = 0; w2 < kThreads / 32; ++w2) b = max(b, warp_max[w2]);
  const float scale = RefitBlockScale(__uint_as_float(b), it.mode);
  if (threadIdx.x == 0) RefitPullQuantStoreScale(it, 0, 0, scale);
  const float inv = __fdiv_rn(1.0f, scale);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int r = r0 + kRows * k;
    if (on && r < rows) RefitPullQuantStoreCodes(it, r, c0, v[k], inv);
  }
}

// Any alignment: element by element, the amax pass then the codes pass.
__device__ void RefitPullQuantScalar(const PullQuantItem& it, long long index, long long* bad,
                                     float* warp_max) {
  const unsigned short* src = reinterpret_cast<const unsigned short*>(it.src);
  auto load = [&](int r, int c) {
    return __uint_as_float(static_cast<unsigned int>(src[r * it.src_pitch + c]) << 16);
  };
  auto store = [&](int r, int c, float x) {
    if (it.dst == nullptr || r < it.w_r0 || r >= it.w_r1 || c < it.w_c0 || c >= it.w_c1) return;
    it.dst[(r - it.w_r0) * it.dst_pitch + (c - it.w_c0)] = static_cast<unsigned char>(
        __nv_cvt_float_to_fp8(fminf(fmaxf(x, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3));
  };
  if (it.tile_r == 1) {  // a thread per 1 x 32 block
    const int nb = (it.cols + it.tile_c - 1) / it.tile_c;
    for (int blk = threadIdx.x; blk < it.rows * nb; blk += blockDim.x) {
      const int r = blk / nb, j = blk % nb, cb = j * it.tile_c, ce = min(cb + it.tile_c, it.cols);
      float m = 0.0f;
      for (int c = cb; c < ce; ++c) {
        const float x = load(r, c);
        if (!isfinite(x)) atomicMin(bad, index);
        m = fmaxf(m, fabsf(x));
      }
      const float scale = RefitBlockScale(m, it.mode);
      RefitPullQuantStoreScale(it, r, j, scale);
      const float inv = __fdiv_rn(1.0f, scale);
      for (int c = cb; c < ce; ++c) store(r, c, __fmul_rn(load(r, c), inv));
    }
    return;
  }
  float m = 0.0f;
  for (int k = threadIdx.x; k < it.rows * it.cols; k += blockDim.x) {
    const float x = load(k / it.cols, k % it.cols);
    if (!isfinite(x)) atomicMin(bad, index);
    m = fmaxf(m, fabsf(x));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  for (unsigned w2 = 0; w2 < blockDim.x / 32; ++w2) m = fmaxf(m, warp_max[w2]);
  const float scale = RefitBlockScale(m, it.mode);
  if (threadIdx.x == 0) RefitPullQuantStoreScale(it, 0, 0, scale);
  const float inv = __fdiv_rn(1.0f, scale);
  for (int k = threadIdx.x; k < it.rows * it.cols; k += blockDim.x) {
    const int r = k / it.cols, c = k % it.cols;
    store(r, c, __fmul_rn(load(r, c), inv));
  }
}

template <int kThreads>
__device__ void RefitPullQuantItem(const PullQuantItem& it, long long index, long long* bad) {
  __shared__ unsigned int warp_max[kPullQuantMaxThreads / 32];
  if (it.vec) {
    RefitPullQuantVector<kThreads>(it, index, bad, warp_max);
  } else {
    RefitPullQuantScalar(it, index, bad, reinterpret_cast<float*>(warp_max));
  }
}

template <int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) RefitPullQuantKernel(
    const PullQuantItem* items, int64_t, long long* bad) {
  const PullQuantItem it = items[blockIdx.x];
  RefitPullQuantItem<kThreads>(it, blockIdx.x, bad);
}

template <int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) RefitPullQuantPersistentKernel(
    const PullQuantItem* items, int64_t n, long long* bad) {
  constexpr int kWords = sizeof(PullQuantItem) / 4;
  static_assert(kWords <= kThreads, "one word of an item per thread");
  __shared__ PullQuantItem buf[2];
  int64_t i = blockIdx.x;
  if (i >= n) return;
  if (threadIdx.x < kWords) {
    reinterpret_cast<unsigned int*>(&buf[0])[threadIdx.x] =
        __ldg(reinterpret_cast<const unsigned int*>(items + i) + threadIdx.x);
  }
  __syncthreads();
  for (int k = 0; i < n; ++k) {
    const int64_t j = i + gridDim.x;
    unsigned int w = 0;  // a word of the next item, in flight meanwhile
    if (threadIdx.x < kWords && j < n) {
      w = __ldg(reinterpret_cast<const unsigned int*>(items + j) + threadIdx.x);
    }
    RefitPullQuantItem<kThreads>(buf[k & 1], i, bad);
    if (threadIdx.x < kWords) reinterpret_cast<unsigned int*>(&buf[(k + 1) & 1])[threadIdx.x] = w;
    __syncthreads();
    i = j;
  }
}

__global__ void RefitCastKernel(const char* in, int dtype, int64_t n, bool neg_exp,
                                float* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const float v = RefitLoadF32(in, dtype, i);
    out[i] = neg_exp ? __double2float_rn(-exp(static_cast<double>(v))) : v;
  }
}

int64_t TileRows(const DenseBox& b) {
  return b.R == 0 ? 0 : (b.r0 + b.R + b.block_r - 1) / b.block_r - b.r0 / b.block_r;
}
int64_t TileCols(const DenseBox& b) {
  return b.C == 0 ? 0 : (b.c0 + b.C + b.block_c - 1) / b.block_c - b.c0 / b.block_c;
}

// (Host helpers; kept out of an anonymous namespace like the kernels.)
// One thread block per tile of the box: (tile cols, tile rows, L).
static dim3 GridOf(const DenseBox& b) {
  return dim3(static_cast<unsigned>(TileCols(b)), static_cast<unsigned>(TileRows(b)),
              static_cast<unsigned>(b.L));
}

// The tiles whose first element lies in the box (their scales are this
// box's to write): first tile row and column, and how many of each.
struct Owned {
  int64_t r0, c0, rows, cols;
};
static Owned OwnedOf(const DenseBox& b) {
  const int64_t r0 = (b.r0 + b.block_r - 1) / b.block_r;
  const int64_t c0 = (b.c0 + b.block_c - 1) / b.block_c;
  const int64_t rows = (b.r0 + b.R + b.block_r - 1) / b.block_r - r0;
  const int64_t cols = (b.c0 + b.C + b.block_c - 1) / b.block_c - c0;
  return {r0, c0, rows > 0 ? rows : 0, cols > 0 ? cols : 0};
}

int LaunchTileAmax(const DenseBox& b, float* amax, long long* bad, void* stream) {
  if (b.L == 0 || b.R == 0 || b.C == 0) return 0;
  if (TileRows(b) > 65535 || TileCols(b) > 0x7FFFFFFF) {
    return static_cast<int>(cudaErrorInvalidValue);  // grid y and x limits
  }
  RefitTileAmaxKernel<<<GridOf(b), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      b, b.r0 / b.block_r, b.c0 / b.block_c, amax, bad);
  return static_cast<int>(cudaGetLastError());
}

int LaunchQuantize(const DenseBox& b, const float* amax, int mode,
                   unsigned char* out, void* scales, void* stream) {
  if (b.L == 0 || b.R == 0 || b.C == 0) return 0;
  if (TileRows(b) > 65535 || TileCols(b) > 0x7FFFFFFF) {
    return static_cast<int>(cudaErrorInvalidValue);  // grid y and x limits
  }
  const Owned o = OwnedOf(b);
  RefitQuantizeKernel<<<GridOf(b), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      b, b.r0 / b.block_r, b.c0 / b.block_c, amax, mode, out, scales, o.r0, o.c0, o.rows,
      o.cols);
  return static_cast<int>(cudaGetLastError());
}

int LaunchQuantizeFused(const DenseBox& b, int mode, unsigned char* out,
                        void* scales, long long* bad, void* stream) {
  if (b.L == 0 || b.R == 0 || b.C == 0) return 0;
  if (b.block_r * b.block_c > kFusedThreads * kFusedPerThread) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (b.block_r == 1 && b.block_c == kMxWarpBlock && b.c0 % kMxWarpBlock == 0 &&
      b.C % kMxWarpBlock == 0 && b.dtype == kConvertBF16 && mode == kScaleE8m0 &&
      reinterpret_cast<uintptr_t>(b.data) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    const int64_t chunks = b.L * b.R * b.C / 8;
    const int64_t ctas = (chunks + kMxVecChunksPerCta - 1) / kMxVecChunksPerCta;
    if (ctas > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
    RefitQuantizeMxBf16x8Kernel<<<static_cast<unsigned>(ctas), kMxVecThreads, 0,
                                  static_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const uint4*>(b.data), chunks, reinterpret_cast<uint2*>(out),
        static_cast<unsigned char*>(scales), bad);
    return static_cast<int>(cudaGetLastError());
  }
  if (b.block_r == 1 && b.block_c == kMxWarpBlock && b.c0 % kMxWarpBlock == 0) {
    const int64_t blocks = b.L * b.R * TileCols(b);
    const int64_t ctas = (blocks + kMxWarps - 1) / kMxWarps;
    if (ctas > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
    RefitQuantizeMxKernel<<<static_cast<unsigned>(ctas), kMxWarps * 32, 0,
                            static_cast<cudaStream_t>(stream)>>>(b, mode, out, scales, bad);
    return static_cast<int>(cudaGetLastError());
  }
  if (TileRows(b) > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid = GridOf(b);
  const Owned o = OwnedOf(b);
  const bool vec = mode != kScaleRequant && mode != kScaleE8m0 && b.dtype == kConvertBF16 &&
                   b.block_r == 128 && b.block_c == 128 && b.C % 8 == 0 &&
                   b.c0 % 8 == 0 && reinterpret_cast<uintptr_t>(b.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (vec) {
    RefitQuantizeBf16x8Kernel<<<grid, kVecThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        b, b.r0 / b.block_r, b.c0 / b.block_c, mode, out, scales, o.r0, o.c0, o.rows, o.cols,
        bad);
    return static_cast<int>(cudaGetLastError());
  }
  RefitQuantizeFusedKernel<<<grid, kFusedThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      b, b.r0 / b.block_r, b.c0 / b.block_c, mode, out, scales, o.r0, o.c0, o.rows, o.cols,
      bad);
  return static_cast<int>(cudaGetLastError());
}

bool PullQuantVectorOk(const PullQuantItem& item) {
  return reinterpret_cast<uintptr_t>(item.src) % 16 == 0 && (item.src_pitch * 2) % 16 == 0 &&
         item.cols % 8 == 0 && item.rows <= 128 && item.cols <= 128;
}

// A launch of kernel `k` with `threads` per block: a block per item, or
// as many persistent blocks as fit on the device.
template <typename Kernel>
static int LaunchShape(Kernel k, bool persistent, int threads, const PullQuantItem* items,
                       int64_t n, long long* bad, cudaStream_t st) {
  int64_t grid = n;
  if (persistent) {
    int device = 0, sms = 0, per_sm = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, 0);
    if (e != cudaSuccess) return static_cast<int>(e);
    grid = std::min<int64_t>(n, static_cast<int64_t>(sms) * std::max(per_sm, 1));
  }
  k<<<static_cast<unsigned>(grid), threads, 0, st>>>(items, n, bad);
  return static_cast<int>(cudaGetLastError());
}

int LaunchPullQuantizeShape(const PullQuantItem* items, int64_t n, long long* bad, void* stream,
                            int threads, bool persistent, bool compact) {
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF || (threads != 128 && threads != 256) || (compact && threads != 256)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (persistent) {
    if (threads == 128) {
      return LaunchShape(RefitPullQuantPersistentKernel<128, 1>, true, 128, items, n, bad, st);
    }
    return compact ? LaunchShape(RefitPullQuantPersistentKernel<256, 5>, true, 256, items, n, bad, st)
                   : LaunchShape(RefitPullQuantPersistentKernel<256, 4>, true, 256, items, n, bad, st);
  }
  if (threads == 128) return LaunchShape(RefitPullQuantKernel<128, 1>, false, 128, items, n, bad, st);
  return compact ? LaunchShape(RefitPullQuantKernel<256, 5>, false, 256, items, n, bad, st)
                 : LaunchShape(RefitPullQuantKernel<256, 4>, false, 256, items, n, bad, st);
}

int LaunchPullQuantize(const PullQuantItem* items, int64_t n, long long* bad, void* stream) {
  return LaunchPullQuantizeShape(items, n, bad, stream, 256, true, false);
}

int LaunchCastF32(const char* in, int dtype, int64_t n, bool neg_exp, float* out,
                  void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  RefitCastKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0,
                    static_cast<cudaStream_t>(stream)>>>(in, dtype, n, neg_exp, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
