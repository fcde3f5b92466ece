// Find and write the changed words of a staged round (see
// changed_words_kernels.h).
#include <algorithm>

#include "exec/delta/cuda/changed_words_kernels.h"

namespace refit {
namespace {

constexpr int kThreads = 256;
// 16-byte chunks per thread per tile: 256 threads x 4 x 16 = one tile.
constexpr int kChunks = 4;
static_assert(kThreads * kChunks * 16 == kChangedTileBytes, "one tile per block step");
constexpr unsigned long long kNoList = ~0ull;

__device__ __forceinline__ uint4 Load16(const char* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

// The `rem` (even, < 16) bytes at p as a chunk, zeros after them.
__device__ __forceinline__ uint4 LoadPart(const char* p, int64_t rem) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    if (2 * u < rem) w[u / 2] |= static_cast<uint32_t>(q[u]) << (16 * (u & 1));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint32_t Lane32(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// Bit u set: 2-byte word u of the chunks differs.
__device__ __forceinline__ uint32_t Diff8(const uint4& a, const uint4& b) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t x = Lane32(a, k) ^ Lane32(b, k);
    m |= static_cast<uint32_t>((x & 0xFFFFu) != 0) << (2 * k);
    m |= static_cast<uint32_t>((x >> 16) != 0) << (2 * k + 1);
  }
  return m;
}

__device__ int PairOf(const ChangedPair* pairs, int32_t n, int64_t tile) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pairs[mid].first_tile <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// One block per tile (a persistent grid stepping over them): each thread
// compares its 4 chunks of both sides, a block scan places its changed
// words, and thread 0 takes the tile's entries from the list.
__global__ void __launch_bounds__(kThreads)
    FindChangedKernel(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                      ChangedTile* tiles, uint32_t* list, uint64_t capacity,
                      unsigned long long* used) {
  __shared__ int s_pair;
  __shared__ uint32_t s_warp[kThreads / 32];
  __shared__ unsigned long long s_base;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    if (threadIdx.x == 0) s_pair = PairOf(pairs, num_pairs, t);
    __syncthreads();
    const ChangedPair p = pairs[s_pair];
    const int64_t off = (t - p.first_tile) * kChangedTileBytes;
    const int64_t tile_bytes = min(kChangedTileBytes, p.bytes - off);
    const char* st = p.staging + off;
    const char* lv = p.live + off;
    uint4 s[kChunks];
    uint32_t mask = 0;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int64_t c = static_cast<int64_t>(threadIdx.x + j * kThreads) * 16;
      uint4 a = make_uint4(0, 0, 0, 0), b = a;
      if (c + 16 <= tile_bytes) {
        a = Load16(st + c);
        b = Load16(lv + c);
      } else if (c < tile_bytes) {
        a = LoadPart(st + c, tile_bytes - c);
        b = LoadPart(lv + c, tile_bytes - c);
      }
      s[j] = a;
      mask |= Diff8(a, b) << (8 * j);
    }
    const uint32_t n = __popc(mask);
    uint32_t incl = n;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
      if (lane >= d) incl += v;
    }
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t total = 0;
      for (int w = 0; w < kThreads / 32; ++w) {
        const uint32_t v = s_warp[w];
        s_warp[w] = total;
        total += v;
      }
      ChangedTile d;
      d.live = reinterpret_cast<uint64_t>(lv);
      d.bytes = static_cast<uint32_t>(tile_bytes);
      unsigned long long base = kNoList;
      if (total == 0) {
        d.count = 0;
      } else {
        if (total <= kChangedListedMax) {
          base = atomicAdd(used, static_cast<unsigned long long>(total));
          if (base + total > capacity) base = kNoList;
        }
        d.count = base == kNoList ? kChangedTileWhole : total;
        d.src = base == kNoList ? reinterpret_cast<uint64_t>(st) : base;
      }
      tiles[t] = d;
      s_base = base;
    }
    __syncthreads();
    if (s_base != kNoList && mask != 0) {
      uint32_t* out = list + s_base + s_warp[warp] + (incl - n);
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if ((mask >> (8 * j + u)) & 1u) {
            const uint32_t word = Lane32(s[j], u / 2);
            const uint32_t value = (u & 1) ? (word >> 16) : (word & 0xFFFFu);
            const uint32_t index = (threadIdx.x + j * kThreads) * 8 + u;
            *out++ = (index << 16) | value;
          }
        }
      }
    }
    __syncthreads();  // s_pair, s_warp and s_base are the next tile's
  }
}

// A warp copies a whole tile, four 16-byte loads in flight per lane.
__device__ __forceinline__ void CopyTile(char* dst, const char* src, uint32_t bytes, int lane) {
  const uint32_t n16 = bytes / 16;
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (uint32_t i = lane; i < n16; i += 128) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (i + 32 * k < n16) v[k] = __ldcs(s + i + 32 * k);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (i + 32 * k < n16) d[i + 32 * k] = v[k];
    }
  }
  const uint32_t tail = (bytes - n16 * 16) / 2;
  if (static_cast<uint32_t>(lane) < tail) {
    reinterpret_cast<uint16_t*>(dst + n16 * 16)[lane] =
        reinterpret_cast<const uint16_t*>(src + n16 * 16)[lane];
  }
}

// One warp per tile (a persistent grid stepping over them): its entries
// four per lane in flight, or its bytes.
__global__ void __launch_bounds__(kThreads)
    WriteChangedKernel(const ChangedTile* tiles, int64_t num_tiles, const uint32_t* list) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; t < num_tiles;
       t += warps) {
    const ChangedTile d = tiles[t];
    if (d.count == 0) continue;
    if (d.count == kChangedTileWhole) {
      CopyTile(reinterpret_cast<char*>(d.live), reinterpret_cast<const char*>(d.src), d.bytes,
               lane);
      continue;
    }
    uint16_t* live = reinterpret_cast<uint16_t*>(d.live);
    const uint32_t* e = list + d.src;
    for (uint32_t i = lane; i < d.count; i += 128) {
      uint32_t x[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        x[k] = i + 32 * k < d.count ? __ldcs(e + i + 32 * k) : 0u;
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (i + 32 * k < d.count) live[x[k] >> 16] = static_cast<uint16_t>(x[k]);
      }
    }
  }
}

// Blocks of kThreads resident on the current device at once.
int64_t ResidentBlocks() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    sms = 132;
  }
  return static_cast<int64_t>(sms) * (2048 / kThreads);
}

}  // namespace

void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                       ChangedTile* tiles, uint32_t* list, uint64_t capacity,
                       unsigned long long* used, cudaStream_t stream) {
  if (num_tiles <= 0 || num_pairs <= 0) return;
  const int64_t grid = std::min<int64_t>(num_tiles, ResidentBlocks());
  FindChangedKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      pairs, num_pairs, num_tiles, tiles, list, capacity, used);
}

void LaunchWriteChanged(const ChangedTile* tiles, int64_t num_tiles, const uint32_t* list,
                        cudaStream_t stream) {
  if (num_tiles <= 0) return;
  const int64_t grid =
      std::min<int64_t>((num_tiles + kThreads / 32 - 1) / (kThreads / 32), ResidentBlocks());
  WriteChangedKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(tiles, num_tiles, list);
}

}  // namespace refit
