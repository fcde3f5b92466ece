// The quantize-on-pull kernel (see pull_quantize_kernels.h).
#include "exec/convert/cuda/pull_quantize_kernels.h"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "exec/convert/cuda/convert_kernels.h"
#include "exec/convert/cuda/quantize_math.cuh"

namespace refit {
namespace cuda {

// Quantize-on-pull (see the header). The 16-byte path: thread t holds 8
// columns (t & 15) of rows t / 16 + (kThreads / 16) k, all its loads in
// flight before the first use; 128 x 128 tiles reduce their amax over the
// block, 1 x 32 blocks over the four lanes holding them. Two launch shapes:
// a thread block per item, or a persistent grid whose blocks walk the items,
// each loading its next item's description while it works on the current
// one (the description's load is then off the critical path).
constexpr int kPullQuantMaxThreads = 256;

// Codes of 8 BF16 at row r, columns c0.. of the region: e4m3(x * inv), or
// for kScaleRequant (t non-null) the requantized e4m3 of exec/convert/quantize.h.
__device__ void RefitPullQuantStoreCodes(const PullQuantItem& it, int r, int c0, uint4 v,
                                         float inv, const RefitTileScales* t = nullptr) {
  if (it.dst == nullptr || r < it.w_r0 || r >= it.w_r1) return;
  const int lo = max(c0, it.w_c0), hi = min(c0 + 8, it.w_c1);
  if (lo >= hi) return;
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
  unsigned int p0 = 0, p1 = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // Finite inputs only: SATFINITE saturates at +-448 as clamping would.
    float2 y = make_float2(__fmul_rn(__uint_as_float(w[q] << 16), inv),
                           __fmul_rn(__uint_as_float(w[q] & 0xFFFF0000u), inv));
    if (t != nullptr) {
      y.x = __fmul_rn(__fmul_rn(RefitE4M3Value(y.x), t->s1), t->inv2);
      y.y = __fmul_rn(__fmul_rn(RefitE4M3Value(y.y), t->s1), t->inv2);
    }
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
      if (it.scale_src != nullptr) {  // a cut block: its owner's E8M0 byte
        const int e = __ldg(it.scale_src + r * it.scale_src_pitch + (g >> 2));
        RefitPullQuantStoreCodes(it, r, c0, v[k], RefitE8m0Inverse(e));
        continue;
      }
      if (it.mode == kScaleE8m0) {
        const int e = RefitE8m0Byte(__uint_as_float(b));
        scale = RefitE8m0Value(e);
        inv = RefitE8m0Inverse(e);
      } else {
        const RefitTileScales ts = RefitScalesOf(__uint_as_float(b), it.mode);
        if ((g & 3) == 0) RefitPullQuantStoreScale(it, r, g >> 2, ts.scale);
        RefitPullQuantStoreCodes(it, r, c0, v[k], ts.inv,
                                 it.mode == kScaleRequant ? &ts : nullptr);
        continue;
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
  if (it.scale_src != nullptr) {  // a cut tile: its owner's scale
    const float inv = __fdiv_rn(1.0f, __ldg(reinterpret_cast<const float*>(it.scale_src)));
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int r = r0 + kRows * k;
      if (on && r < rows) RefitPullQuantStoreCodes(it, r, c0, v[k], inv);
    }
    return;
  }
  b = __reduce_max_sync(0xffffffffu, b);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = b;
  __syncthreads();
#pragma unroll
  for (int w2 = 0; w2 < kThreads / 32; ++w2) b = max(b, warp_max[w2]);
  const RefitTileScales ts = RefitScalesOf(__uint_as_float(b), it.mode);
  if (threadIdx.x == 0) RefitPullQuantStoreScale(it, 0, 0, ts.scale);
  const RefitTileScales* rq = it.mode == kScaleRequant ? &ts : nullptr;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int r = r0 + kRows * k;
    if (on && r < rows) RefitPullQuantStoreCodes(it, r, c0, v[k], ts.inv, rq);
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
      if (it.scale_src != nullptr) {  // a cut block: its owner's scale
        const float inv =
            it.mode == kScaleE8m0
                ? RefitE8m0Inverse(it.scale_src[r * it.scale_src_pitch + j])
                : __fdiv_rn(1.0f, reinterpret_cast<const float*>(it.scale_src)[r * it.scale_src_pitch + j]);
        for (int c = cb; c < ce; ++c) store(r, c, __fmul_rn(load(r, c), inv));
        continue;
      }
      const RefitTileScales ts = RefitScalesOf(m, it.mode);
      RefitPullQuantStoreScale(it, r, j, ts.scale);
      for (int c = cb; c < ce; ++c) store(r, c, RefitScaled(load(r, c), ts, it.mode));
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
  if (it.scale_src != nullptr) {  // a cut tile: its owner's scale
    const float inv = __fdiv_rn(1.0f, *reinterpret_cast<const float*>(it.scale_src));
    for (int k = threadIdx.x; k < it.rows * it.cols; k += blockDim.x) {
      const int r = k / it.cols, c = k % it.cols;
      store(r, c, __fmul_rn(load(r, c), inv));
    }
    return;
  }
  const RefitTileScales ts = RefitScalesOf(m, it.mode);
  if (threadIdx.x == 0) RefitPullQuantStoreScale(it, 0, 0, ts.scale);
  for (int k = threadIdx.x; k < it.rows * it.cols; k += blockDim.x) {
    const int r = k / it.cols, c = k % it.cols;
    store(r, c, RefitScaled(load(r, c), ts, it.mode));
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
  // A block of 256 threads per item: the fastest shape on an H200
  // (fused_pull_gpu_test, 2026-11-26: FP8 0.193 ms, MXFP8 0.240 ms for
  // 268M elements; persistent 0.217 / 0.287 ms).
  return LaunchPullQuantizeShape(items, n, bad, stream, 256, false, false);
}

}  // namespace cuda
}  // namespace refit
