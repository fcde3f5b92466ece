// Mark and write the changed sectors of a staged round (see
// changed_words_kernels.h).
#include "exec/delta/cuda/changed_words_kernels.h"

#include <algorithm>

namespace refit {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpStep = 512;  // bytes a warp moves per step: 16 per lane
constexpr int kSteps = kChangedTileBytes / kWarpStep;
static_assert(kSteps == 2 * kChangedMaskWords, "two steps per mask word");

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

// The even bits of x (pairs of 16-byte chunks: one sector each) packed
// into the low 16 bits.
__device__ __forceinline__ uint32_t EvenBits(uint32_t x) {
  x &= 0x55555555u;
  x = (x | (x >> 1)) & 0x33333333u;
  x = (x | (x >> 2)) & 0x0F0F0F0Fu;
  x = (x | (x >> 4)) & 0x00FF00FFu;
  return (x | (x >> 8)) & 0x0000FFFFu;
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
// in flight; a ballot per step gives its 16 sectors' bits.
__global__ void __launch_bounds__(kThreads)
    FindChangedKernel(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                      uint32_t* mask) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; t < num_tiles;
       t += warps) {
    const ChangedPair p = pairs[PairOf(pairs, num_pairs, t)];
    const int64_t off = (t - p.first_tile) * kChangedTileBytes;
    const int64_t tile_bytes = min(static_cast<int64_t>(kChangedTileBytes), p.bytes - off);
    const char* src = p.src + off;
    const char* dst = p.dst + off;
    uint32_t word = 0;  // lane w < kChangedMaskWords: mask word w of the tile
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
        const uint32_t x = __ballot_sync(0xFFFFFFFFu, differs);
        const uint32_t bits = EvenBits(x | (x >> 1));
        const int s = s0 + k;
        if (lane == s / 2) word |= bits << (16 * (s & 1));
      }
    }
    if (lane < kChangedMaskWords) mask[t * kChangedMaskWords + lane] = word;
  }
}

// One warp per tile (a persistent grid stepping over them): lane l copies
// bytes [16 l, 16 l + 16) of each 512-byte step whose sector is marked
// (every one without a mask), eight steps in flight; the two lanes of a
// sector write it whole in one store.
__global__ void __launch_bounds__(kThreads)
    WriteChangedKernel(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                       const uint32_t* mask) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; t < num_tiles;
       t += warps) {
    uint32_t word = 0xFFFFFFFFu;
    if (mask != nullptr) {
      word = lane < kChangedMaskWords ? mask[t * kChangedMaskWords + lane] : 0u;
      if (__ballot_sync(0xFFFFFFFFu, word != 0) == 0) continue;  // nothing changed
    }
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
        const int s = s0 + k;
        const uint32_t w = mask != nullptr ? __shfl_sync(0xFFFFFFFFu, word, s / 2) : word;
        const int64_t at = static_cast<int64_t>(s) * kWarpStep + lane * 16;
        on[k] = ((w >> (16 * (s & 1) + lane / 2)) & 1u) != 0 && at < tile_bytes;
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

void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                       uint32_t* mask, cudaStream_t stream) {
  if (num_tiles <= 0 || num_pairs <= 0) return;
  FindChangedKernel<<<static_cast<unsigned>(Grid(num_tiles)), kThreads, 0, stream>>>(
      pairs, num_pairs, num_tiles, mask);
}

void LaunchWriteChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                        const uint32_t* mask, cudaStream_t stream) {
  if (num_tiles <= 0 || num_pairs <= 0) return;
  WriteChangedKernel<<<static_cast<unsigned>(Grid(num_tiles)), kThreads, 0, stream>>>(
      pairs, num_pairs, num_tiles, mask);
}

}  // namespace refit
