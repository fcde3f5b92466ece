// Mark and write the changed sectors of a staged round (see
// changed_words_kernels.h).
#include "exec/delta/cuda/changed_words_kernels.h"

#include <algorithm>

namespace refit {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpStep = 512;  // bytes a warp moves per step: 16 per lane
constexpr int kSteps = kChangedTileBytes / kWarpStep;

// The `rem` (< 16) bytes at p as a chunk, zeros after them.
__device__ __forceinline__ uint4 LoadPart(const char* p, int64_t rem) {
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (i < rem) w[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * (i % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// A chunk of the tile: `at` of `tile_bytes`, whole, partial or past it.
__device__ __forceinline__ uint4 LoadChunk(const char* p, int64_t at, int64_t tile_bytes) {
  if (at + 16 <= tile_bytes) return __ldcs(reinterpret_cast<const uint4*>(p + at));
  if (at < tile_bytes) return LoadPart(p + at, tile_bytes - at);
  return make_uint4(0, 0, 0, 0);
}

// The bits of the blocks of `c` consecutive 16-byte chunks in the chunk
// bits x (bit k: block k has a set chunk bit), 32 / c of them.
__device__ __forceinline__ uint32_t BlockBits(uint32_t x, int c) {
  uint32_t bits = 0;
  const uint32_t ones = (1u << c) - 1;
  for (int k = 0; k < 32 / c; ++k) bits |= static_cast<uint32_t>(((x >> (k * c)) & ones) != 0) << k;
  return bits;
}

__device__ __forceinline__ int PairOf(const ChangedPair* pairs, int32_t n, int64_t tile) {
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

// One warp per tile (a persistent grid stepping over them): lane l reads
// bytes [16 l, 16 l + 16) of each 512-byte step of both sides, four steps
// in flight; a ballot per step gives its blocks' bits (512 / unit).
__global__ void __launch_bounds__(kThreads)
    FindChangedKernel(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                      uint32_t* mask) {
  const int lane = threadIdx.x & 31;
  const int c = unit / 16;             // chunks of a block
  const int per_step = kWarpStep / unit;  // blocks of a step: 16, 8 or 4
  const int words = kChangedTileBytes / unit / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
       t < num_tiles; t += warps) {
    const ChangedPair p = pairs[PairOf(pairs, num_pairs, t)];
    const int64_t off = (t - p.first_tile) * kChangedTileBytes;
    const int64_t tile_bytes = min(static_cast<int64_t>(kChangedTileBytes), p.bytes - off);
    const char* src = p.src + off;
    const char* dst = p.dst + off;
    uint32_t word = 0;  // lane w < words: mask word w of the tile
#pragma unroll 1
    for (int s0 = 0; s0 < kSteps; s0 += 4) {
      uint4 a[4], b[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t at = static_cast<int64_t>(s0 + k) * kWarpStep + lane * 16;
        a[k] = LoadChunk(src, at, tile_bytes);
        b[k] = LoadChunk(dst, at, tile_bytes);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool differs =
            a[k].x != b[k].x || a[k].y != b[k].y || a[k].z != b[k].z || a[k].w != b[k].w;
        const uint32_t bits = BlockBits(__ballot_sync(0xFFFFFFFFu, differs), c);
        const int first = (s0 + k) * per_step;  // the step's first block in the tile
        if (lane == first / 32) word |= bits << (first % 32);
      }
    }
    if (lane < words) mask[t * words + lane] = word;
  }
}

// One warp per tile (a persistent grid stepping over them): lane l copies
// bytes [16 l, 16 l + 16) of each 512-byte step whose block is marked,
// eight steps in flight; the lanes of a block write it whole in one
// store. A tile with no mark is skipped after one read of its words.
__global__ void __launch_bounds__(kThreads)
    WriteChangedKernel(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                       const uint32_t* mask) {
  const int lane = threadIdx.x & 31;
  const int words = kChangedTileBytes / unit / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
       t < num_tiles; t += warps) {
    const uint32_t word = lane < words ? mask[t * words + lane] : 0u;
    if (__ballot_sync(0xFFFFFFFFu, word != 0) == 0) continue;
    const ChangedPair p = pairs[PairOf(pairs, num_pairs, t)];
    const int64_t off = (t - p.first_tile) * kChangedTileBytes;
    const int64_t tile_bytes = min(static_cast<int64_t>(kChangedTileBytes), p.bytes - off);
    const char* src = p.src + off;
    char* dst = p.dst + off;
#pragma unroll 1
    for (int s0 = 0; s0 < kSteps; s0 += 8) {
      uint4 v[8];
      bool on[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t at = static_cast<int64_t>(s0 + k) * kWarpStep + lane * 16;
        const int block = static_cast<int>(at / unit);
        const uint32_t w = __shfl_sync(0xFFFFFFFFu, word, block / 32);
        on[k] = ((w >> (block % 32)) & 1u) != 0 && at < tile_bytes;
        if (on[k] && at + 16 <= tile_bytes) {
          v[k] = __ldcs(reinterpret_cast<const uint4*>(src + at));
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (!on[k]) continue;
        const int64_t at = static_cast<int64_t>(s0 + k) * kWarpStep + lane * 16;
        if (at + 16 <= tile_bytes) {
          *reinterpret_cast<uint4*>(dst + at) = v[k];
        } else {
          for (int64_t i = at; i < tile_bytes; ++i) dst[i] = src[i];
        }
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

int64_t Grid(int64_t num_tiles) {
  return std::min<int64_t>((num_tiles + kThreads / 32 - 1) / (kThreads / 32), ResidentBlocks());
}

}  // namespace

void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                       uint32_t* mask, cudaStream_t stream) {
  if (num_tiles <= 0 || num_pairs <= 0 || !ChangedUnitOk(unit)) return;
  FindChangedKernel<<<static_cast<unsigned>(Grid(num_tiles)), kThreads, 0, stream>>>(
      pairs, num_pairs, num_tiles, unit, mask);
}

void LaunchWriteChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                        const uint32_t* mask, cudaStream_t stream) {
  if (num_tiles <= 0 || num_pairs <= 0 || !ChangedUnitOk(unit)) return;
  WriteChangedKernel<<<static_cast<unsigned>(Grid(num_tiles)), kThreads, 0, stream>>>(
      pairs, num_pairs, num_tiles, unit, mask);
}

}  // namespace refit
