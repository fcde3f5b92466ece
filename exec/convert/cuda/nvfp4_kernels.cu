// CUDA NVFP4 kernels (see nvfp4_kernels.h). The general kernels: one
// thread per 1 x 16 tile of a row, the arithmetic of exec/convert/nvfp4.cc with
// IEEE f32 operations (__fdiv_rn / __fmul_rn). The fast ones (BF16, whole
// 16-aligned tiles): 16-byte loads, and for the quantize pass a thread per
// 16-block dividing by a reciprocal (nvfp4_block.cuh, exec/convert/nvfp4_math.h);
// the same bytes.
#include "exec/convert/cuda/nvfp4_kernels.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "exec/convert/cuda/nvfp4_block.cuh"

namespace refit {
namespace cuda {

// Kept out of an anonymous namespace (reproducible objects).
__device__ float RefitNvfp4Load(const char* p, int dtype, int64_t i) {
  if (dtype == kConvertBF16) {
    const unsigned short h = reinterpret_cast<const unsigned short*>(p)[i];
    return __uint_as_float(static_cast<unsigned int>(h) << 16);
  }
  if (dtype == kConvertF16) return __half2float(reinterpret_cast<const __half*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}

// F32ToE2M1 of exec/convert/nvfp4.cc, by the bits.
__device__ unsigned int RefitE2M1(float y) {
  const unsigned int sign = y < 0.0f ? 8u : 0u;
  const float a = fabsf(y);
  if (a < 1.0f) return sign | static_cast<unsigned int>(__float2int_rn(a * 2.0f));
  unsigned int u = __float_as_uint(a);
  u = (u + 0x1FFFFFu + ((u >> 22) & 1u)) & 0xFFC00000u;
  const unsigned int c = (u >> 22) - 252u;
  return sign | (c < 7u ? c : 7u);
}

// A tile's columns [lo, hi) in the box's own coordinates.
struct RefitNvfp4Tile {
  int64_t row, t, lo, hi;
};

__device__ bool RefitNvfp4TileOf(const DenseBox& b, int64_t tiles, int64_t first,
                                 RefitNvfp4Tile* x) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= b.L * b.R * tiles) return false;
  x->row = k / tiles;
  x->t = k % tiles;
  x->lo = max((first + x->t) * kNvfp4KernelBlock, b.c0) - b.c0;
  x->hi = min((first + x->t + 1) * kNvfp4KernelBlock, b.c0 + b.C) - b.c0;
  return true;
}

// Whole aligned BF16 tile: 16 values by two 16-byte loads.
__device__ bool RefitNvfp4Vec(const DenseBox& b, const RefitNvfp4Tile& x) {
  return b.dtype == kConvertBF16 && x.hi - x.lo == kNvfp4KernelBlock &&
         ((reinterpret_cast<uintptr_t>(b.data) + 2 * (x.row * b.C + x.lo)) & 15) == 0;
}

__device__ void RefitNvfp4Values(const DenseBox& b, const RefitNvfp4Tile& x, float* v) {
  if (RefitNvfp4Vec(b, x)) {
    const uint4* p = reinterpret_cast<const uint4*>(b.data + 2 * (x.row * b.C + x.lo));
    const uint4 q[2] = {p[0], p[1]};
    const unsigned int* w = reinterpret_cast<const unsigned int*>(q);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
    return;
  }
  for (int64_t i = 0; i < 16; ++i) {
    v[i] = x.lo + i < x.hi ? RefitNvfp4Load(b.data, b.dtype, x.row * b.C + x.lo + i) : 0.0f;
  }
}

__global__ void RefitNvfp4AmaxKernel(DenseBox b, int64_t tiles, int64_t first,
                                     float* block_amax, float* global_amax, long long* bad) {
  RefitNvfp4Tile x;
  float m = 0.0f;
  int64_t l = -1;
  if (RefitNvfp4TileOf(b, tiles, first, &x)) {
    float v[16];
    RefitNvfp4Values(b, x, v);
    for (int i = 0; i < 16; ++i) {
      if (!isfinite(v[i])) atomicMin(bad, static_cast<long long>(x.row * b.C + x.lo + i));
      m = fmaxf(m, fabsf(v[i]));
    }
    if (block_amax != nullptr) block_amax[x.row * tiles + x.t] = m;
    l = x.row / b.R;
  }
  // Non-negative floats order as their bits: one atomicMax per warp and l.
  const unsigned int active = __activemask();
  const int64_t l0 = __shfl_sync(active, l, __ffs(active) - 1);
  if (__all_sync(active, l == l0)) {
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(active, m, o));
    if ((threadIdx.x & 31) == __ffs(active) - 1 && l >= 0) {
      atomicMax(reinterpret_cast<unsigned int*>(global_amax) + l, __float_as_uint(m));
    }
  } else if (l >= 0) {
    atomicMax(reinterpret_cast<unsigned int*>(global_amax) + l, __float_as_uint(m));
  }
}

__global__ void RefitNvfp4QuantizeKernel(DenseBox b, int64_t tiles, int64_t first,
                                         const float* block_amax, const float* global_amax,
                                         unsigned char* out, unsigned char* scales,
                                         int64_t owned0, int64_t owned) {
  RefitNvfp4Tile x;
  if (!RefitNvfp4TileOf(b, tiles, first, &x)) return;
  float v[16];
  RefitNvfp4Values(b, x, v);
  float amax = 0.0f;
  if (block_amax != nullptr) {
    amax = block_amax[x.row * tiles + x.t];
  } else {
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
  const float g = __fmul_rn(global_amax[x.row / b.R], 1.0f / 2688.0f);
  float s = __fdiv_rn(amax, __fmul_rn(6.0f, g));
  if (s == 0.0f) s = 1.0f;
  s = fmaxf(s, 0.001953125f);
  const __nv_fp8_storage_t sb = __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
  const float d = __fmul_rn(__half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3))), g);
  const int64_t n = x.hi - x.lo;
  unsigned int packed[2] = {0u, 0u};
  for (int i = 0; i < 16; i += 2) {
    if (i >= n) break;
    const unsigned int byte = RefitE2M1(__fdiv_rn(v[i], d)) | RefitE2M1(__fdiv_rn(v[i + 1], d)) << 4;
    packed[i / 8] |= byte << (8 * ((i / 2) % 4));
  }
  unsigned char* o = out + (x.row * b.C + x.lo) / 2;
  if (n == 16 && (reinterpret_cast<uintptr_t>(o) & 7) == 0) {
    *reinterpret_cast<uint2*>(o) = make_uint2(packed[0], packed[1]);
  } else {
    for (int64_t j = 0; j < n / 2; ++j) o[j] = (packed[j / 4] >> (8 * (j % 4))) & 0xFF;
  }
  const int64_t j = first + x.t - owned0;
  if (scales != nullptr && j >= 0 && j < owned) scales[x.row * owned + j] = sb;
}

// Fast path: BF16, every tile whole (c0 and C multiples of 16), 16-byte
// aligned rows. Thread i of the grid-stride loop takes elements [8i, 8i+8)
// of the dense box (one 16-byte load, one 4-byte store); lanes 2j and
// 2j+1 hold one tile and combine their amaxes by a shuffle. Leading index
// l of element 8i: i / per_l (per_l = R * C / 8), found by division only
// when i crosses into the next l.
__device__ void RefitNvfp4Eight(const uint4& q, float* v) {
  const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
  }
}

// Eights a thread loads before it computes on them (memory parallelism).
constexpr int kNvfp4Unroll = 4;

__global__ void __launch_bounds__(256) RefitNvfp4AmaxFastKernel(
    const char* data, int64_t halves, int64_t per_l, float* block_amax, float* global_amax,
    long long* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t l = -1, l_end = 0;
  float run = 0.0f;
  // Every thread runs the same number of rounds, so the shuffles see whole
  // warps; eight j of a round is i0 + j * stride.
  const int64_t step = stride * kNvfp4Unroll;
  const int64_t rounds = (halves + step - 1) / step;
  const uint4* in4 = reinterpret_cast<const uint4*>(data);
  int64_t i0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t it = 0; it < rounds; ++it, i0 += step) {
    uint4 q[kNvfp4Unroll];
#pragma unroll
    for (int j = 0; j < kNvfp4Unroll; ++j) {
      const int64_t i = i0 + j * stride;
      if (i < halves) q[j] = in4[i];
    }
#pragma unroll
    for (int j = 0; j < kNvfp4Unroll; ++j) {
      const int64_t i = i0 + j * stride;
      const bool in = i < halves;
      float m = 0.0f;
      if (in) {
        float v[8];
        RefitNvfp4Eight(q[j], v);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (!isfinite(v[k])) atomicMin(bad, static_cast<long long>(8 * i + k));
          m = fmaxf(m, fabsf(v[k]));
        }
        if (i >= l_end) {
          if (l >= 0) {
            atomicMax(reinterpret_cast<unsigned int*>(global_amax) + l, __float_as_uint(run));
          }
          l = i / per_l;
          l_end = (l + 1) * per_l;
          run = 0.0f;
        }
        run = fmaxf(run, m);
      }
      if (block_amax != nullptr) {
        const float pair = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        if (in && (i & 1) == 0) block_amax[i / 2] = pair;
      }
    }
  }
  // One atomic per warp when its lanes end on one leading index.
  const long long l0 = __shfl_sync(0xffffffffu, static_cast<long long>(l), 0);
  if (__all_sync(0xffffffffu, l == l0 || l < 0)) {
    for (int o = 16; o > 0; o >>= 1) run = fmaxf(run, __shfl_xor_sync(0xffffffffu, run, o));
    if ((threadIdx.x & 31) == 0 && l0 >= 0) {
      atomicMax(reinterpret_cast<unsigned int*>(global_amax) + l0, __float_as_uint(run));
    }
  } else if (l >= 0) {
    atomicMax(reinterpret_cast<unsigned int*>(global_amax) + l, __float_as_uint(run));
  }
}

// Fast quantize pass: a thread per 16-block (two 16-byte loads, one
// 8-byte store of codes, one scale byte), kNvfp4Blocks blocks loaded
// before the first is computed; no division per element
// (nvfp4_block.cuh). Leading index l of block i: i / per_l (per_l =
// R * C / 16), found by division only when i crosses into the next l.
constexpr int kNvfp4Blocks = 2;

__global__ void __launch_bounds__(256) RefitNvfp4QuantizeFastKernel(
    const char* data, int64_t blocks, int64_t per_l, const float* block_amax,
    const float* global_amax, unsigned char* out, unsigned char* scales) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint4* in4 = reinterpret_cast<const uint4*>(data);
  int64_t l = -1, l_end = 0;
  float g = 0.0f;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < blocks;
       i0 += stride * kNvfp4Blocks) {
    uint4 q[kNvfp4Blocks][2];
#pragma unroll
    for (int j = 0; j < kNvfp4Blocks; ++j) {
      const int64_t i = i0 + j * stride;
      if (i < blocks) {
        q[j][0] = __ldg(in4 + 2 * i);
        q[j][1] = __ldg(in4 + 2 * i + 1);
      }
    }
#pragma unroll
    for (int j = 0; j < kNvfp4Blocks; ++j) {
      const int64_t i = i0 + j * stride;
      if (i >= blocks) break;
      if (i >= l_end) {
        l = i / per_l;
        l_end = (l + 1) * per_l;
        g = Nvfp4Global(global_amax[l]);
      }
      const float amax = block_amax != nullptr
                             ? block_amax[i]
                             : __uint_as_float(RefitNvfp4AbsMaxBits(q[j][0], q[j][1]));
      float d;
      const unsigned int sb = RefitNvfp4Scale(amax, g, &d);
      reinterpret_cast<uint2*>(out)[i] = RefitNvfp4Codes(q[j][0], q[j][1], d);
      if (scales != nullptr) scales[i] = static_cast<unsigned char>(sb);
    }
  }
}

// Fast quantize pass by thresholds (nvfp4_block.cuh): each thread block
// takes a contiguous run of `chunk` 16-blocks, and for each leading index
// l in its run builds the threshold table of l's global scale in shared
// memory, then codes its 16-blocks with BF16 comparisons (kTableUnroll per
// thread loaded before the first is computed). A 16-block with a value
// that is not finite, or a global scale that is not, takes RefitNvfp4Codes'
// arithmetic.
constexpr int kTableUnroll = 4;  // 16-blocks a thread in flight
__global__ void __launch_bounds__(256) RefitNvfp4QuantizeTableKernel(
    const char* data, int64_t blocks, int64_t per_l, int64_t chunk, const float* block_amax,
    const float* global_amax, unsigned char* out, unsigned char* scales) {
  __shared__ uint4 table[kRefitNvfp4TableEntries];
  const uint4* in4 = reinterpret_cast<const uint4*>(data);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = min(begin + chunk, blocks);
  for (int64_t seg = begin; seg < end;) {
    const int64_t l = seg / per_l;
    const int64_t seg_end = min(end, (l + 1) * per_l);
    const float g = Nvfp4Global(global_amax[l]);
    const bool by_table = isfinite(g);  // the same for the whole thread block
    __syncthreads();
    if (by_table) RefitNvfp4BuildTable(g, reinterpret_cast<unsigned short*>(table));
    __syncthreads();
    for (int64_t i0 = seg + threadIdx.x; i0 < seg_end; i0 += kTableUnroll * blockDim.x) {
      uint4 q[kTableUnroll][2];
#pragma unroll
      for (int j = 0; j < kTableUnroll; ++j) {
        const int64_t i = i0 + j * blockDim.x;
        if (i < seg_end) {
          q[j][0] = __ldg(in4 + 2 * i);
          q[j][1] = __ldg(in4 + 2 * i + 1);
        }
      }
#pragma unroll
      for (int j = 0; j < kTableUnroll; ++j) {
        const int64_t i = i0 + j * blockDim.x;
        if (i >= seg_end) break;
        unsigned int a[8];
        RefitNvfp4Magnitudes(q[j][0], q[j][1], a);
        const unsigned int bits = RefitNvfp4AbsMaxPacked(a);
        const float amax = block_amax != nullptr ? block_amax[i] : __uint_as_float(bits);
        float d;
        uint2 codes;
        unsigned int sb;
        if (by_table && bits < 0x7F800000u && isfinite(amax)) {
          sb = __nv_cvt_float_to_fp8(Nvfp4BlockScale(amax, g), __NV_SATFINITE, __NV_E4M3);
          codes = RefitNvfp4CodesByTable(q[j][0], q[j][1], a, table[sb]);
        } else {
          sb = RefitNvfp4Scale(block_amax != nullptr
                                   ? amax
                                   : __uint_as_float(RefitNvfp4AbsMaxBits(q[j][0], q[j][1])),
                               g, &d);
          codes = RefitNvfp4Codes(q[j][0], q[j][1], d);
        }
        reinterpret_cast<uint2*>(out)[i] = codes;
        if (scales != nullptr) scales[i] = static_cast<unsigned char>(sb);
      }
    }
    seg = seg_end;
  }
}

namespace {

int64_t TilesOf(const DenseBox& b, int64_t* first) {
  *first = b.c0 / 16;
  return (b.c0 + b.C + 15) / 16 - *first;
}

unsigned BlocksFor(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

bool Fast(const DenseBox& b) {
  return b.dtype == kConvertBF16 && b.c0 % 16 == 0 && b.C % 16 == 0 &&
         (reinterpret_cast<uintptr_t>(b.data) & 15) == 0;
}

// As many blocks of 256 threads as are resident at once on the device (a
// grid-stride loop then has no tail wave), at most one per 256 pieces of
// work.
unsigned FastBlocks(const void* kernel, int64_t work) {
  static int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
  }();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0) != cudaSuccess ||
      per_sm <= 0) {
    per_sm = 4;
  }
  const int64_t want = (work + 255) / 256;
  const int64_t cap = static_cast<int64_t>(sms) * per_sm;
  return static_cast<unsigned>(want < cap ? (want > 0 ? want : 1) : cap);
}

}  // namespace

int LaunchNvfp4Amax(const DenseBox& b, float* block_amax, float* global_amax,
                    long long* bad, void* stream) {
  if (b.L == 0 || b.R == 0 || b.C == 0) return 0;
  int64_t first = 0;
  const int64_t tiles = TilesOf(b, &first);
  const int64_t n = b.L * b.R * tiles;
  if (n / 256 >= 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
  if (Fast(b)) {
    const int64_t halves = b.L * b.R * b.C / 8;
    const unsigned grid =
        FastBlocks(reinterpret_cast<const void*>(RefitNvfp4AmaxFastKernel), halves);
    RefitNvfp4AmaxFastKernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        b.data, halves, b.R * b.C / 8, block_amax, global_amax, bad);
    return static_cast<int>(cudaGetLastError());
  }
  RefitNvfp4AmaxKernel<<<BlocksFor(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      b, tiles, first, block_amax, global_amax, bad);
  return static_cast<int>(cudaGetLastError());
}

int LaunchNvfp4Quantize(const DenseBox& b, const float* block_amax,
                        const float* global_amax, unsigned char* out,
                        unsigned char* scales, void* stream) {
  if (b.L == 0 || b.R == 0 || b.C == 0) return 0;
  if (b.c0 % 2 != 0 || b.C % 2 != 0) return static_cast<int>(cudaErrorInvalidValue);
  int64_t first = 0;
  const int64_t tiles = TilesOf(b, &first);
  const int64_t n = b.L * b.R * tiles;
  if (n / 256 >= 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t owned0 = (b.c0 + 15) / 16;
  const int64_t owned_end = (b.c0 + b.C + 15) / 16;
  const int64_t owned = owned_end > owned0 ? owned_end - owned0 : 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (Fast(b) && (reinterpret_cast<uintptr_t>(out) & 7) == 0) {
    const int64_t blocks = b.L * b.R * b.C / 16;
    const int64_t per_l = b.R * b.C / 16;
    if (blocks < kNvfp4TableMinBlocks) {
      const unsigned grid =
          FastBlocks(reinterpret_cast<const void*>(RefitNvfp4QuantizeFastKernel), blocks);
      RefitNvfp4QuantizeFastKernel<<<grid, 256, 0, s>>>(b.data, blocks, per_l, block_amax,
                                                         global_amax, out, scales);
      return static_cast<int>(cudaGetLastError());
    }
    const unsigned grid =
        FastBlocks(reinterpret_cast<const void*>(RefitNvfp4QuantizeTableKernel), blocks);
    const int64_t chunk = (blocks + grid - 1) / grid;
    RefitNvfp4QuantizeTableKernel<<<grid, 256, 0, s>>>(b.data, blocks, per_l, chunk, block_amax,
                                                       global_amax, out, scales);
    return static_cast<int>(cudaGetLastError());
  }
  RefitNvfp4QuantizeKernel<<<BlocksFor(n, 256), 256, 0, s>>>(
      b, tiles, first, block_amax, global_amax, out, scales, owned0, owned);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
