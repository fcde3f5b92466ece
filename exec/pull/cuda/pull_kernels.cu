// The colocated data plane's gather-scatter kernel (see pull_kernels.h).
#include "exec/pull/cuda/pull_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace refit {
namespace cuda {

constexpr int kPullThreads = 512;
constexpr int kPullUnroll = 4;

template <typename W>
__device__ __forceinline__ void PullWords(const PullItem& it) {
  const uint32_t total = it.rows * it.row_words;
  const uint32_t step = kPullThreads * kPullUnroll;
  for (uint32_t base = threadIdx.x; base < total; base += step) {
    W v[kPullUnroll];
#pragma unroll
    for (int k = 0; k < kPullUnroll; ++k) {
      const uint32_t i = base + k * kPullThreads;
      if (i < total) {
        const uint32_t row = it.rows == 1 ? 0 : i / it.row_words;
        const uint32_t col = i - row * it.row_words;
        v[k] = *(reinterpret_cast<const W*>(it.src + row * it.src_row_stride) + col);
      }
    }
#pragma unroll
    for (int k = 0; k < kPullUnroll; ++k) {
      const uint32_t i = base + k * kPullThreads;
      if (i < total) {
        const uint32_t row = it.rows == 1 ? 0 : i / it.row_words;
        const uint32_t col = i - row * it.row_words;
        *(reinterpret_cast<W*>(it.dst + row * it.dst_row_stride) + col) = v[k];
      }
    }
  }
}

__global__ void __launch_bounds__(kPullThreads)
    PullKernel(const PullItem* __restrict__ items, int64_t n) {
  // One item a block, or (a bounded grid) every gridDim.x-th item.
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const PullItem it = items[k];
    switch (it.word_shift) {
      case 4: PullWords<uint4>(it); break;
      case 3: PullWords<unsigned long long>(it); break;
      case 2: PullWords<unsigned int>(it); break;
      case 1: PullWords<unsigned short>(it); break;
      default: PullWords<unsigned char>(it); break;
    }
  }
}

__global__ void XorKernel(char* p, int64_t bytes, uint8_t key) {
  const uint32_t k4 = 0x01010101u * key;
  const int64_t words = bytes / 16;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += stride) {
    uint4 v = reinterpret_cast<uint4*>(p)[i];
    v.x ^= k4; v.y ^= k4; v.z ^= k4; v.w ^= k4;
    reinterpret_cast<uint4*>(p)[i] = v;
  }
  for (int64_t i = words * 16 + static_cast<int64_t>(blockIdx.x) * blockDim.x +
                   threadIdx.x;
       i < bytes; i += stride) {
    p[i] ^= key;
  }
}

__device__ __forceinline__ unsigned long long Mix(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void ChecksumKernel(const char* p, int64_t bytes, uint8_t key,
                               unsigned long long* out) {
  unsigned long long sum = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < bytes; i += stride) {
    const unsigned long long b = static_cast<uint8_t>(p[i]) ^ key;
    sum += Mix((static_cast<unsigned long long>(i) << 8) | b);
  }
  atomicAdd(out, sum);
}

namespace {

uint32_t WordShift(const ResolvedCopy& c) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(c.src) |
                        reinterpret_cast<uintptr_t>(c.dst) |
                        static_cast<uint64_t>(c.row_bytes) |
                        static_cast<uint64_t>(c.rows > 1 ? c.src_row_stride : 0) |
                        static_cast<uint64_t>(c.rows > 1 ? c.dst_row_stride : 0);
  uint32_t s = 4;
  while (s > 0 && (bits & ((1ull << s) - 1)) != 0) --s;
  return s;
}

}  // namespace

std::vector<PullItem> SplitPullItems(const std::vector<ResolvedCopy>& copies,
                                     int64_t max_item_bytes) {
  max_item_bytes = std::max<int64_t>(16, max_item_bytes / 16 * 16);
  std::vector<PullItem> out;
  for (ResolvedCopy c : copies) {
    if (c.rows <= 0 || c.row_bytes <= 0) continue;
    if (c.rows > 1 && c.src_row_stride == c.row_bytes &&
        c.dst_row_stride == c.row_bytes) {
      c.row_bytes *= c.rows;  // one contiguous range on both sides
      c.rows = 1;
    }
    const uint32_t ws = WordShift(c);
    if (c.row_bytes >= max_item_bytes || c.rows == 1) {
      // Each row in pieces of at most max_item_bytes.
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t o = 0; o < c.row_bytes; o += max_item_bytes) {
          const int64_t n = std::min(max_item_bytes, c.row_bytes - o);
          out.push_back({c.src + r * c.src_row_stride + o,
                         c.dst + r * c.dst_row_stride + o, n, n, 1,
                         static_cast<uint32_t>(n >> ws), ws, 0});
        }
      }
      continue;
    }
    const int64_t per = std::max<int64_t>(1, max_item_bytes / c.row_bytes);
    for (int64_t r = 0; r < c.rows; r += per) {
      const int64_t n = std::min(per, c.rows - r);
      out.push_back({c.src + r * c.src_row_stride, c.dst + r * c.dst_row_stride,
                     c.src_row_stride, c.dst_row_stride, static_cast<uint32_t>(n),
                     static_cast<uint32_t>(c.row_bytes >> ws), ws, 0});
    }
  }
  return out;
}

int LaunchPull(const PullItem* items, int64_t n, void* stream, int32_t max_blocks) {
  if (n <= 0) return 0;
  const int64_t blocks = max_blocks > 0 ? std::min<int64_t>(n, max_blocks) : n;
  PullKernel<<<static_cast<unsigned>(blocks), kPullThreads, 0,
               static_cast<cudaStream_t>(stream)>>>(items, n);
  return static_cast<int>(cudaGetLastError());
}

int LaunchXorBytes(char* p, int64_t bytes, uint8_t key, void* stream) {
  if (bytes <= 0) return 0;
  XorKernel<<<1024, 512, 0, static_cast<cudaStream_t>(stream)>>>(p, bytes, key);
  return static_cast<int>(cudaGetLastError());
}

int LaunchChecksum(const char* p, int64_t bytes, uint8_t key,
                   unsigned long long* sum, void* stream) {
  if (bytes <= 0) return 0;
  ChecksumKernel<<<2048, 512, 0, static_cast<cudaStream_t>(stream)>>>(p, bytes, key, sum);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
