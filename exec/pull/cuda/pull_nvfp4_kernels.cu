// The NVFP4 quantize-on-pull kernel (see pull_nvfp4_kernels.h): a thread
// block per item, a thread per 16-block (two 16-byte loads, up to four
// blocks in flight a thread), codes by the thresholds of the item's table
// or by the arithmetic of nvfp4_block.cuh.
#include "exec/pull/cuda/pull_nvfp4_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/convert/cuda/nvfp4_block.cuh"

namespace refit {
namespace cuda {

constexpr int kPullNvfp4Threads = 256;
static_assert(kPullNvfp4TableBytes == sizeof(uint4) * kRefitNvfp4TableEntries,
              "a table is one entry per e4m3 scale byte");
constexpr int kPullNvfp4Loads = 4;  // 16-blocks a thread loads before computing
// (64 registers, four blocks of 256 threads an SM)

// Kept out of an anonymous namespace (reproducible objects).
__device__ void RefitPullNvfp4Load(const PullNvfp4Item& it, int r, int b, uint4* q) {
  const char* p = it.src + 2 * (static_cast<int64_t>(r) * it.src_pitch + 16 * b);
  if (it.vec) {
    q[0] = __ldg(reinterpret_cast<const uint4*>(p));
    q[1] = __ldg(reinterpret_cast<const uint4*>(p) + 1);
    return;
  }
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  unsigned int w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    w[i] = static_cast<unsigned int>(h[2 * i]) | static_cast<unsigned int>(h[2 * i + 1]) << 16;
  }
  q[0] = make_uint4(w[0], w[1], w[2], w[3]);
  q[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

__device__ void RefitPullNvfp4Store(const PullNvfp4Item& it, int r, int b, uint2 codes,
                                    unsigned int sb) {
  if (it.scales != nullptr && r >= it.s_r0 && r < it.s_r1 && b >= it.s_c0 && b < it.s_c1) {
    it.scales[(r - it.s_r0) * it.scale_pitch + (b - it.s_c0)] = static_cast<unsigned char>(sb);
  }
  if (it.dst == nullptr || r < it.w_r0 || r >= it.w_r1) return;
  const int c0 = 16 * b, lo = max(c0, it.w_c0), hi = min(c0 + 16, it.w_c1);
  if (lo >= hi) return;
  unsigned char* row = it.dst + (r - it.w_r0) * it.dst_pitch;
  if (lo == c0 && hi == c0 + 16) {
    unsigned char* o = row + (c0 - it.w_c0) / 2;
    if ((reinterpret_cast<uintptr_t>(o) & 7) == 0) {
      *reinterpret_cast<uint2*>(o) = codes;
      return;
    }
  }
  for (int c = lo; c < hi; c += 2) {
    const int k = (c - c0) / 2;
    const unsigned int word = k < 4 ? codes.x : codes.y;
    row[(c - it.w_c0) / 2] = static_cast<unsigned char>((word >> (8 * (k & 3))) & 0xFF);
  }
}

__global__ void __launch_bounds__(256) RefitPullNvfp4TablesKernel(const float* const* global_amax,
                                                                   uint4* tables) {
  const float g = Nvfp4Global(__ldg(global_amax[blockIdx.x]));
  RefitNvfp4BuildTable(g, reinterpret_cast<unsigned short*>(tables + kRefitNvfp4TableEntries *
                                                                          blockIdx.x));
}

__global__ void __launch_bounds__(256) RefitPullNvfp4RebuildKernel(
    const PullNvfp4EngineTable* list, uint4* tables) {
  const PullNvfp4EngineTable e = list[blockIdx.x];
  if (*e.changed == 0) return;
  const float amax = *e.amax;
  if (threadIdx.x == 0) {
    *e.out_amax = amax;
    if (e.out_scale != nullptr) *e.out_scale = Nvfp4Global(amax);
  }
  RefitNvfp4BuildTable(Nvfp4Global(amax),
                       reinterpret_cast<unsigned short*>(tables + kRefitNvfp4TableEntries * e.table));
}

// Item `index` (one thread block): codes and scales; the region's finite
// amax raises *it.seen. Every thread of the block calls it.
__device__ void RefitPullNvfp4Item(const PullNvfp4Item& it, long long index, long long* bad) {
  __shared__ unsigned int block_max;
  if (threadIdx.x == 0) block_max = 0;
  const float g = Nvfp4Global(__ldg(it.global_amax));
  const uint4* table = isfinite(g) ? static_cast<const uint4*>(it.table) : nullptr;
  const int nb = it.cols / 16, total = it.rows * nb;
  bool nonfinite = false;
  unsigned int seen = 0;
  for (int base = 0; base < total; base += kPullNvfp4Threads * kPullNvfp4Loads) {
    uint4 q[kPullNvfp4Loads][2];
#pragma unroll
    for (int j = 0; j < kPullNvfp4Loads; ++j) {
      const int k = base + threadIdx.x + kPullNvfp4Threads * j;
      if (k < total) RefitPullNvfp4Load(it, k / nb, k % nb, q[j]);
    }
#pragma unroll
    for (int j = 0; j < kPullNvfp4Loads; ++j) {
      const int k = base + threadIdx.x + kPullNvfp4Threads * j;
      if (k >= total) break;
      unsigned int a[8];
      RefitNvfp4Magnitudes(q[j][0], q[j][1], a);
      const unsigned int m = RefitNvfp4AbsMaxPacked(a);
      if (m < 0x7F800000u) seen = max(seen, m);
      if (m < 0x7F800000u && table != nullptr) {
        const unsigned int sb =
            __nv_cvt_float_to_fp8(Nvfp4BlockScale(__uint_as_float(m), g), __NV_SATFINITE,
                                  __NV_E4M3);
        RefitPullNvfp4Store(it, k / nb, k % nb,
                            RefitNvfp4CodesByTable(q[j][0], q[j][1], a, __ldg(table + sb)), sb);
        continue;
      }
      nonfinite |= m >= 0x7F800000u;
      float d;
      const unsigned int sb =
          RefitNvfp4Scale(__uint_as_float(RefitNvfp4AbsMaxBits(q[j][0], q[j][1])), g, &d);
      RefitPullNvfp4Store(it, k / nb, k % nb, RefitNvfp4Codes(q[j][0], q[j][1], d), sb);
    }
  }
  if (nonfinite) atomicMin(bad, index);
  if (it.seen == nullptr) return;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) seen = max(seen, __shfl_xor_sync(0xFFFFFFFFu, seen, o));
  __syncthreads();  // block_max set
  if ((threadIdx.x & 31) == 0 && seen > 0) atomicMax(&block_max, seen);
  __syncthreads();
  if (threadIdx.x == 0 && block_max > 0) atomicMax(it.seen, block_max);
  __syncthreads();  // block_max read before a next item resets it
}

__global__ void __launch_bounds__(kPullNvfp4Threads, 4) RefitPullNvfp4Kernel(
    const PullNvfp4Item* items, long long* bad) {
  RefitPullNvfp4Item(items[blockIdx.x], blockIdx.x, bad);
}

__global__ void __launch_bounds__(kPullNvfp4Threads, 4) RefitPullNvfp4RedoKernel(
    const PullNvfp4Item* items, long long n, long long* bad) {
  for (long long i = blockIdx.x; i < n; i += gridDim.x) {
    const int* changed = items[i].changed;
    if (changed == nullptr || *changed == 0) continue;
    RefitPullNvfp4Item(items[i], i, bad);
  }
}

__global__ void RefitPullNvfp4EngineAmaxKernel(const PullNvfp4EngineAmax* entries, long long n,
                                               long long* zero) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const PullNvfp4EngineAmax e = entries[i];
    const unsigned int seen = *e.seen;
    *e.seen = 0;
    const int changed = seen != __float_as_uint(*e.amax) ? 1 : 0;
    *e.changed = changed;
    if (changed) *e.amax = __uint_as_float(seen);
    if (seen == 0) atomicMin(zero, i);
  }
}

bool PullNvfp4VectorOk(const PullNvfp4Item& item) {
  return reinterpret_cast<uintptr_t>(item.src) % 16 == 0 && (item.src_pitch * 2) % 16 == 0;
}

int LaunchPullNvfp4Tables(const float* const* global_amax, int64_t n, void* tables,
                          void* stream) {
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
  RefitPullNvfp4TablesKernel<<<static_cast<unsigned>(n), 256, 0,
                               static_cast<cudaStream_t>(stream)>>>(global_amax,
                                                                    static_cast<uint4*>(tables));
  return static_cast<int>(cudaGetLastError());
}

int LaunchPullNvfp4Rebuild(const PullNvfp4EngineTable* list, int64_t n, void* tables,
                           void* stream) {
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
  RefitPullNvfp4RebuildKernel<<<static_cast<unsigned>(n), 256, 0,
                                static_cast<cudaStream_t>(stream)>>>(list,
                                                                     static_cast<uint4*>(tables));
  return static_cast<int>(cudaGetLastError());
}

int LaunchPullNvfp4(const PullNvfp4Item* items, int64_t n, long long* bad, void* stream) {
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);
  RefitPullNvfp4Kernel<<<static_cast<unsigned>(n), kPullNvfp4Threads, 0,
                         static_cast<cudaStream_t>(stream)>>>(items, bad);
  return static_cast<int>(cudaGetLastError());
}

int LaunchPullNvfp4EngineAmax(const PullNvfp4EngineAmax* entries, int64_t n, long long* zero,
                              void* stream) {
  if (n == 0) return 0;
  const long long blocks = (n + 255) / 256;
  RefitPullNvfp4EngineAmaxKernel<<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), 256, 0,
                                   static_cast<cudaStream_t>(stream)>>>(entries, n, zero);
  return static_cast<int>(cudaGetLastError());
}

int LaunchPullNvfp4Redo(const PullNvfp4Item* items, int64_t n, long long* bad, void* stream) {
  if (n == 0) return 0;
  // A few thread blocks an SM walk the items; most return at once.
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  const long long blocks = n < 4LL * sms ? n : 4LL * sms;
  RefitPullNvfp4RedoKernel<<<static_cast<unsigned>(blocks), kPullNvfp4Threads, 0,
                             static_cast<cudaStream_t>(stream)>>>(items, n, bad);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
