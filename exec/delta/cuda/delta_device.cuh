// Device helpers shared by the delta kernels (delta_kernels.cu, the mask
// pass in delta_mask_kernels.cu): 16-byte chunks of current and snapshot
// bytes, their changed-word bits, block scans, and the batch's message of
// a tile. Included by .cu files only.
#ifndef REFIT_EXEC_DELTA_CUDA_DELTA_DEVICE_CUH_
#define REFIT_EXEC_DELTA_CUDA_DELTA_DEVICE_CUH_

#include <cstdint>

#include "exec/delta/cuda/delta_kernels.h"

namespace refit {

constexpr int kDeltaThreads = 256;
constexpr int kDeltaChunk = 16;  // bytes one thread compares at a time

struct DeltaChunk {
  uint32_t w[4];
};

__device__ inline DeltaChunk DeltaLoad(const uint8_t* p, int64_t off, int64_t end,
                                       bool aligned) {
  DeltaChunk c;
  if (aligned && off + kDeltaChunk <= end) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p + off));
    c.w[0] = v.x;
    c.w[1] = v.y;
    c.w[2] = v.z;
    c.w[3] = v.w;
    return c;
  }
  for (int i = 0; i < 4; ++i) {
    uint32_t x = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t o = off + 4 * i + k;
      if (o < end) x |= static_cast<uint32_t>(p[o]) << (8 * k);
    }
    c.w[i] = x;
  }
  return c;
}

// Bit j set when word j of the chunk (16 / w words) differs.
__device__ inline uint32_t DeltaDiffBits(const DeltaChunk& a, const DeltaChunk& b, int w) {
  uint32_t bits = 0;
  if (w == 1) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t d = __vcmpne4(a.w[i], b.w[i]) & 0x80808080u;
      bits |= (((d >> 7) & 1u) | ((d >> 14) & 2u) | ((d >> 21) & 4u) | ((d >> 28) & 8u))
              << (4 * i);
    }
  } else if (w == 2) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t d = __vcmpne2(a.w[i], b.w[i]);
      bits |= (((d >> 15) & 1u) | ((d >> 30) & 2u)) << (2 * i);
    }
  } else if (w == 4) {
    for (int i = 0; i < 4; ++i) bits |= (a.w[i] != b.w[i] ? 1u : 0u) << i;
  } else {
    bits = ((a.w[0] != b.w[0] || a.w[1] != b.w[1]) ? 1u : 0u) |
           ((a.w[2] != b.w[2] || a.w[3] != b.w[3]) ? 2u : 0u);
  }
  return bits;
}

// Inclusive prefix sum of `v` over the calling warp's 32 lanes (every lane
// of the warp calls it).
template <typename T>
__device__ inline T WarpInclusiveScan(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  return v;
}

// Exclusive prefix sum of `v` over the block's kDeltaThreads threads and,
// when `total` is given, the block's sum. Safe to call again right away.
// (T = uint64_t scans four 16-bit counts packed in one word at once.)
template <typename T>
__device__ inline T BlockExclusiveScan(T v, T* total = nullptr) {
  __shared__ T warp_totals[kDeltaThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const T inc = WarpInclusiveScan(v);
  if (lane == 31) warp_totals[warp] = inc;
  __syncthreads();
  T before = 0, all = 0;
  for (int k = 0; k < kDeltaThreads / 32; ++k) {
    if (k < warp) before += warp_totals[k];
    all += warp_totals[k];
  }
  __syncthreads();
  if (total != nullptr) *total = all;
  return before + inc - v;
}

__device__ inline uint32_t DeltaBlockSum(uint32_t v) {
  __shared__ uint32_t warp_sums[kDeltaThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t total = 0;
  for (int k = 0; k < kDeltaThreads / 32; ++k) total += warp_sums[k];
  return total;
}

// Word j of a chunk (w bytes, little-endian), by selects: a dynamic index
// into the chunk would put the thread's chunks in local memory.
__device__ inline uint64_t WaveWordAt(const DeltaChunk& c, int w, int j) {
  const int byte = j * w;
  const int q = byte >> 2;
  const uint32_t lo = q == 0 ? c.w[0] : q == 1 ? c.w[1] : q == 2 ? c.w[2] : c.w[3];
  if (w == 8) {
    const uint32_t hi = q == 0 ? c.w[1] : c.w[3];
    return static_cast<uint64_t>(lo) | (static_cast<uint64_t>(hi) << 32);
  }
  const uint32_t x = lo >> (8 * (byte & 3));
  return w == 4 ? x : w == 2 ? (x & 0xffffu) : (x & 0xffu);
}

__device__ inline bool WaveAligned(const void* a, const void* b) {
  return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15u) == 0;
}

// The row (a message or a digest run) a tile of a batch belongs to: the
// last row whose first_tile is at most g (rows with no tiles share the next
// row's first_tile, so the last such row is the one that owns g). Every
// lane of a warp reads the same rows: broadcasts, cached.
template <typename Row>
__device__ inline int32_t WaveFindRow(const Row* rows, int32_t num_rows, int64_t g) {
  int32_t lo = 0, hi = num_rows;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) / 2;
    if (rows[mid].first_tile <= g) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}
__device__ inline int32_t WaveFindMsg(const WaveMsg* msgs, int32_t num_msgs, int64_t g) {
  return WaveFindRow(msgs, num_msgs, g);
}

// The mask pass reads a tile in warp steps of 512 bytes (16 per lane).
constexpr int kMaskStep = 32 * kDeltaChunk;  // bytes per warp step
constexpr int kMaskSteps = static_cast<int>(kDeltaTileBytes / kMaskStep);
static_assert(kMaskSteps == 64, "a tile is 64 warp steps");

template <int W>
__device__ inline void WaveStoreWord(uint8_t* p, uint64_t v) {
  if (W == 1) {
    *p = static_cast<uint8_t>(v);
  } else if (W == 2) {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
  } else if (W == 4) {
    *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
  } else {
    *reinterpret_cast<uint64_t*>(p) = v;
  }
}

// A tile's mask words [0, words) from its changed words' indices idx[0, n)
// (word indices in the message; `first`: the tile's first), by one warp:
// zeroed, then each index's bit set. The warp's earlier writes of idx are
// seen, and the mask is complete for every lane on return.
__device__ inline void WaveMaskFromIndices(const uint32_t* idx, uint32_t n, uint32_t first,
                                           int words, uint32_t* mask) {
  const int lane = threadIdx.x & 31;
  __syncwarp();
  for (int k = lane; k < words; k += 32) mask[k] = 0;
  __syncwarp();
  for (uint32_t k = lane; k < n; k += 32) {
    const uint32_t j = idx[k] - first;
    atomicOr(mask + j / 32, 1u << (j % 32));
  }
  __syncwarp();
}
}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_DELTA_DEVICE_CUH_
