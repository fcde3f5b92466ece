// Kernels for delta and verified rounds (see delta_kernels.h).
#include "exec/delta/cuda/delta_kernels.h"

#include <cstdint>

#include "exec/delta/cuda/delta_device.cuh"
#include "exec/delta/digest_term.h"

namespace refit {

// Mask word k of a byte mask of `mask_bytes` bytes (zero past its end).
__device__ inline uint32_t DeltaMaskWord(const uint8_t* mask, int64_t mask_bytes, int64_t k) {
  const int64_t o = 4 * k;
  if ((reinterpret_cast<uintptr_t>(mask) & 3u) == 0 && o + 4 <= mask_bytes) {
    return *reinterpret_cast<const uint32_t*>(mask + o);
  }
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i) {
    if (o + i < mask_bytes) x |= static_cast<uint32_t>(mask[o + i]) << (8 * i);
  }
  return x;
}

// One block of 1024 threads. A pass takes kScanRows rows of 1024 counts,
// one count a thread a row (coalesced loads, all of a pass's in flight at
// once); each row's warps scan their 32 counts by shuffles, the pass's
// (row, warp) sums are scanned once, and each count's offset is its warp's
// base plus its rank in the warp (coalesced stores).
constexpr int kScanRows = 16;

__global__ void __launch_bounds__(1024) TileScanKernel(const uint32_t* counts, int64_t n,
                                                       uint64_t* offsets, uint64_t* total) {
  __shared__ uint64_t part[kScanRows * 32];  // per (row, warp): its sum, then its base
  __shared__ uint64_t row_base[32];
  __shared__ uint64_t pass_sum;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  uint64_t carry = 0;  // the passes before this one
  for (int64_t base = 0; base < n; base += kScanRows * 1024) {
    uint32_t v[kScanRows];
#pragma unroll
    for (int k = 0; k < kScanRows; ++k) {
      const int64_t i = base + k * 1024 + t;
      v[k] = i < n ? counts[i] : 0u;
    }
#pragma unroll
    for (int k = 0; k < kScanRows; ++k) v[k] = WarpInclusiveScan(v[k]);
    if (lane == 31) {
#pragma unroll
      for (int k = 0; k < kScanRows; ++k) part[k * 32 + warp] = v[k];
    }
    __syncthreads();
    // Thread t < kScanRows * 32 holds (row t / 32, warp t % 32): row-major
    // is the counts' order.
    uint64_t e = 0, inc = 0;
    if (t < kScanRows * 32) {
      e = part[t];
      inc = WarpInclusiveScan(e);
      if (lane == 31) row_base[warp] = inc;  // the row's sum
    }
    __syncthreads();
    if (warp == 0) {
      const uint64_t r = lane < kScanRows ? row_base[lane] : 0;
      const uint64_t rinc = WarpInclusiveScan(r);
      row_base[lane] = rinc - r;
      if (lane == 31) pass_sum = rinc;
    }
    __syncthreads();
    if (t < kScanRows * 32) part[t] = carry + row_base[warp] + inc - e;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kScanRows; ++k) {
      const uint32_t before = __shfl_up_sync(0xffffffffu, v[k], 1);
      const int64_t i = base + k * 1024 + t;
      if (i < n) offsets[i] = part[k * 32 + warp] + (lane == 0 ? 0u : before);
    }
    carry += pass_sum;
    __syncthreads();  // part, row_base and pass_sum are the next pass's
  }
  if (t == 0) *total = carry;
}

// ---- Batched over a wave's messages (WaveMsg / WaveTile rows).

// Calls f(local word, rank) for each set bit of one tile's `mask_words` mask
// words (word(k) reads word k), in order, ranks from rank_base.
template <typename Word, typename F>
__device__ inline void WaveForEachSetBit(int64_t mask_words, uint64_t rank_base, Word word,
                                         F f) {
  const int64_t per = (mask_words + kDeltaThreads - 1) / kDeltaThreads;
  const int64_t lo = min(mask_words, threadIdx.x * per);
  const int64_t hi = min(mask_words, lo + per);
  uint32_t mine = 0;
  for (int64_t k = lo; k < hi; ++k) mine += __popc(word(k));
  uint64_t rank = rank_base + BlockExclusiveScan<uint32_t>(mine);
  for (int64_t k = lo; k < hi; ++k) {
    uint32_t m = word(k);
    while (m != 0) {
      const int bit = __ffs(m) - 1;
      m &= m - 1;
      f(static_cast<uint64_t>(k) * 32 + bit, rank++);
    }
  }
}


// A w-byte word at p (w-aligned, as in a tile's value slot).
template <int W>
__device__ inline uint64_t WaveLoadWord(const uint8_t* p) {
  if (W == 1) return *p;
  if (W == 2) return *reinterpret_cast<const uint16_t*>(p);
  if (W == 4) return *reinterpret_cast<const uint32_t*>(p);
  return *reinterpret_cast<const uint64_t*>(p);
}

// A w-byte word to p, in one store when p allows it (a payload's values
// follow its u32 indices: 8-byte words may sit on 4 bytes).
template <int W>
__device__ inline void WaveStoreWordAt(uint8_t* p, uint64_t v) {
  if ((reinterpret_cast<uintptr_t>(p) & (W - 1)) == 0) {
    WaveStoreWord<W>(p, v);
  } else {
    for (int b = 0; b < W; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
  }
}

// Copies one w-byte word, in one access when both ends allow it.
__device__ inline void WaveCopyWord(uint8_t* dst, const uint8_t* src, int w) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if (w == 2 && (a & 1u) == 0) {
    *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
  } else if (w == 4 && (a & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
  } else if (w == 8 && (a & 7u) == 0) {
    *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src);
  } else {
    for (int b = 0; b < w; ++b) dst[b] = src[b];
  }
}


__device__ inline uint32_t WaveLoadU32(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}


// A u32 at p, in one store when aligned.
__device__ inline void WaveStoreU32(uint8_t* p, uint32_t x) {
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = x;
  } else {
    for (int b = 0; b < 4; ++b) p[b] = static_cast<uint8_t>(x >> (8 * b));
  }
}

// The gather: one warp per tile, no block-wide step. A kBitmask message
// gets the tile's mask words; the changed values come from the tile's
// value slot (one coalesced copy) when the mask pass kept them, else from
// the current bytes; a kIndices message gets each changed word's index,
// copied from the tile's index slot when the mask pass kept them.
// Lane l owns mask words [l * kPer, (l + 1) * kPer) of the tile: their set
// bits' ranks are the lane's exclusive prefix of set bits (a warp scan).
template <int W>
__device__ inline void WaveGatherTileWarp(const WaveMsg& m, int64_t tile, int64_t g,
                                          const uint32_t* mask, const uint32_t* tile_counts,
                                          const uint64_t* tile_offsets, const uint8_t* vals,
                                          const uint32_t* idx, uint32_t* smask) {
  if (m.encoding != 1 && m.encoding != 2) return;  // kIndices, kBitmask
  constexpr int64_t kWpt = kDeltaTileBytes / W;  // words per tile
  constexpr int kMw = static_cast<int>(kWpt / 32);  // mask words per tile
  constexpr int kPer = kMw / 32;                  // mask words per lane
  const int lane = threadIdx.x & 31;
  const int64_t n = m.bytes / W;
  const uint64_t rank_base = tile_offsets[g] - tile_offsets[m.first_tile];
  const int64_t first_word = tile * kWpt;
  const uint32_t count = tile_counts[g];
  const bool compact =
      vals != nullptr && count <= static_cast<uint32_t>(kWaveValueBytesPerTile / W);
  const bool indexed =
      m.encoding == 1 && count <= static_cast<uint32_t>(kWaveIndexSlots);
  // The mask pass wrote the mask of a tile whose words outgrew the slots
  // (kWaveSlotsCap); any other tile's is its indices' bits, built here when
  // needed.
  const uint32_t* tmask = mask + g * kWaveMaskWordsPerTile;
  if (count <= static_cast<uint32_t>(kWaveSlotsCap<W>) &&
      (m.encoding == 2 || !compact || !indexed)) {
    WaveMaskFromIndices(idx + g * kWaveIndexSlots, count, static_cast<uint32_t>(first_word), kMw,
                        smask);
    tmask = smask;
  }
  uint8_t* values;
  uint8_t* indices = nullptr;
  if (m.encoding == 1) {
    indices = m.out;
    values = m.out + m.changed * 4;
  } else {
    const int64_t mask_bytes = (n + 7) / 8;
    values = m.out + mask_bytes;
    constexpr int kLoads = kMw / 32 < 4 ? kMw / 32 : 4;  // mask words in flight a lane
    for (int k0 = 0; k0 < kMw; k0 += 32 * kLoads) {
      uint32_t w[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) w[j] = tmask[k0 + j * 32 + lane];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        const int64_t at = (first_word / 32 + k0 + j * 32 + lane) * 4;
        if (at + 4 <= mask_bytes) {
          WaveStoreU32(m.out + at, w[j]);
        } else {
          for (int i = 0; i < 4; ++i) {
            if (at + i < mask_bytes) m.out[at + i] = static_cast<uint8_t>(w[j] >> (8 * i));
          }
        }
      }
    }
  }
  if (compact) {
    // The slots' words in groups of four a lane, every load of a group
    // before its stores: the gather waits on memory once a group, not once
    // a word.
    const uint8_t* tv = vals + g * kWaveValueBytesPerTile;
    const uint32_t* ti = indexed ? idx + g * kWaveIndexSlots : nullptr;
    uint8_t* dst = values + rank_base * W;
    uint8_t* di = indexed ? indices + rank_base * 4 : nullptr;
    constexpr int kGroup = 4;
    for (uint32_t k0 = 0; k0 < count; k0 += 32 * kGroup) {
      uint64_t v[kGroup];
      uint32_t x[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const uint32_t k = k0 + j * 32 + lane;
        if (k < count) {
          v[j] = WaveLoadWord<W>(tv + k * W);
          if (indexed) x[j] = ti[k];
        }
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const uint32_t k = k0 + j * 32 + lane;
        if (k < count) {
          WaveStoreWordAt<W>(dst + k * W, v[j]);
          if (indexed) WaveStoreU32(di + k * 4, x[j]);
        }
      }
    }
    if (indices == nullptr || indexed) return;
  }
  uint32_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) mine += __popc(tmask[lane * kPer + j]);
  const uint32_t inc = WarpInclusiveScan(mine);
  uint64_t r = rank_base + (inc - mine);
  for (int j = 0; j < kPer; ++j) {
    uint32_t bits = tmask[lane * kPer + j];
    while (bits != 0) {
      const int bit = __ffs(bits) - 1;
      bits &= bits - 1;
      const int64_t i = first_word + static_cast<int64_t>(lane * kPer + j) * 32 + bit;
      if (indices != nullptr) WaveStoreU32(indices + r * 4, static_cast<uint32_t>(i));
      if (!compact) WaveCopyWord(values + r * W, m.cur + i * W, W);
      ++r;
    }
  }
}

// One tile a warp: the gather is bound by memory latency, not bandwidth,
// so as many tiles as possible wait at once.
// The rows and headers are read where they are (__grid_constant__: the
// launch's parameters, not a copy of them per thread).
__global__ void __launch_bounds__(kDeltaThreads) WaveGatherKernel(
    const __grid_constant__ WaveRows rows, int64_t num_tiles, const uint32_t* mask,
    const uint32_t* tile_counts, const uint64_t* tile_offsets, const uint8_t* vals,
    const uint32_t* idx, const __grid_constant__ WaveHeaders headers) {
  // The wave's headers to their place.
  const uint8_t* hsrc = headers.device != nullptr ? headers.device : headers.inline_bytes;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < headers.bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    headers.out[i] = hsrc[i];
  }
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5);
  if (g >= num_tiles) return;  // a whole warp
  // Each warp's tile mask, where it is built from the tile's indices.
  __shared__ uint32_t smasks[kDeltaThreads / 32][kWaveMaskWordsPerTile];
  uint32_t* sm = smasks[threadIdx.x >> 5];
  const WaveMsg* msgs = rows.device != nullptr ? rows.device : rows.inline_rows;
  const WaveMsg m = msgs[WaveFindMsg(msgs, rows.num, g)];
  const int64_t t = g - m.first_tile;
  switch (m.word) {
    case 1: WaveGatherTileWarp<1>(m, t, g, mask, tile_counts, tile_offsets, vals, idx, sm); break;
    case 2: WaveGatherTileWarp<2>(m, t, g, mask, tile_counts, tile_offsets, vals, idx, sm); break;
    case 4: WaveGatherTileWarp<4>(m, t, g, mask, tile_counts, tile_offsets, vals, idx, sm); break;
    default: WaveGatherTileWarp<8>(m, t, g, mask, tile_counts, tile_offsets, vals, idx, sm); break;
  }
}

__global__ void WaveApplyCountKernel(const WaveMsg* msgs, int32_t num_msgs,
                                     uint32_t* tile_counts, uint32_t* bad, uint32_t* bad_any) {
  const int64_t g = blockIdx.x;
  const int32_t mi = WaveFindMsg(msgs, num_msgs, g);
  const WaveMsg m = msgs[mi];
  const WaveTile t = {mi, static_cast<int32_t>(g - m.first_tile)};
  const int w = m.word;
  const int64_t n = m.bytes / w;
  if (m.encoding == 1) {
    const int64_t k0 = static_cast<int64_t>(t.tile) * kWaveIndicesPerTile;
    const int64_t k1 = min(m.changed, k0 + kWaveIndicesPerTile);
    for (int64_t k = k0 + threadIdx.x; k < k1; k += kDeltaThreads) {
      const uint32_t i = WaveLoadU32(m.cur + k * 4);
      if (i >= static_cast<uint64_t>(n) || (k > 0 && i <= WaveLoadU32(m.cur + (k - 1) * 4))) {
        bad[t.msg] = 1;
        *bad_any = 1;
      }
    }
    if (threadIdx.x == 0) tile_counts[g] = 0;
    return;
  }
  const int64_t mw = kDeltaTileBytes / w / 32;
  const int64_t mask_bytes = (n + 7) / 8;
  uint32_t count = 0;
  for (int64_t k = threadIdx.x; k < mw; k += kDeltaThreads) {
    count += __popc(DeltaMaskWord(m.cur, mask_bytes, static_cast<int64_t>(t.tile) * mw + k));
  }
  const uint32_t total = DeltaBlockSum(count);
  if (threadIdx.x == 0) tile_counts[g] = total;
}

__global__ void WaveApplyCheckKernel(const WaveMsg* msgs, int64_t num_msgs,
                                     const uint32_t* tile_counts, const uint64_t* tile_offsets,
                                     uint32_t* bad, uint32_t* bad_any) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_msgs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const WaveMsg m = msgs[i];
    if (m.encoding != 2) continue;
    const int64_t n = m.bytes / m.word;
    const int64_t mask_bytes = (n + 7) / 8;
    const int64_t nt = (m.bytes + kDeltaTileBytes - 1) / kDeltaTileBytes;
    const int64_t last = m.first_tile + nt - 1;
    const uint64_t set =
        nt == 0 ? 0 : tile_offsets[last] + tile_counts[last] - tile_offsets[m.first_tile];
    const int tail = static_cast<int>(n % 8);
    const bool past_end = tail != 0 && (m.cur[mask_bytes - 1] >> tail) != 0;
    if (set != static_cast<uint64_t>(m.changed) || past_end) {
      bad[i] = 1;
      *bad_any = 1;
    }
  }
}

__global__ void WaveScatterKernel(const WaveMsg* msgs, int32_t num_msgs,
                                  const uint64_t* tile_offsets, const uint32_t* bad_any) {
  if (*bad_any != 0) return;
  const int64_t g = blockIdx.x;
  const int32_t mi = WaveFindMsg(msgs, num_msgs, g);
  const WaveMsg m = msgs[mi];
  const WaveTile t = {mi, static_cast<int32_t>(g - m.first_tile)};
  const int w = m.word;
  const int64_t n = m.bytes / w;
  if (m.encoding == 1) {
    const uint8_t* values = m.cur + m.changed * 4;
    const int64_t k0 = static_cast<int64_t>(t.tile) * kWaveIndicesPerTile;
    const int64_t k1 = min(m.changed, k0 + kWaveIndicesPerTile);
    for (int64_t k = k0 + threadIdx.x; k < k1; k += kDeltaThreads) {
      const uint64_t i = WaveLoadU32(m.cur + k * 4);
      WaveCopyWord(m.out + i * w, values + k * w, w);
    }
    return;
  }
  const int64_t wpt = kDeltaTileBytes / w;
  const int64_t mw = wpt / 32;
  const int64_t mask_bytes = (n + 7) / 8;
  const uint8_t* values = m.cur + mask_bytes;
  const int64_t first_word = static_cast<int64_t>(t.tile) * wpt;
  const uint64_t rank_base = tile_offsets[g] - tile_offsets[m.first_tile];
  WaveForEachSetBit(
      mw, rank_base,
      [&](int64_t k) { return DeltaMaskWord(m.cur, mask_bytes, first_word / 32 + k); },
      [&](uint64_t local, uint64_t r) {
        const uint64_t i = first_word + local;
        WaveCopyWord(m.out + i * w, values + r * w, w);
      });
}

// The digest pass: one warp per tile, kDigestTilesPerWarp consecutive
// tiles a warp (one search for the first one's run), kDigestUnroll of its
// 512-byte steps loaded at once; a warp's sum goes to its slot with one
// atomic per run it touches (tiles of one run share a slot).
constexpr int kDigestTilesPerWarp = 4;
constexpr int kDigestUnroll = 4;

__device__ inline void WaveDigestFlush(uint64_t s, unsigned long long* sum) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0 && s != 0) atomicAdd(sum, static_cast<unsigned long long>(s));
}

__global__ void __launch_bounds__(kDeltaThreads) WaveDigestKernel(
    const WaveDigestRun* runs, int32_t num_runs, int64_t num_tiles, unsigned long long* sums) {
  const int64_t g0 =
      (static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5)) *
      kDigestTilesPerWarp;
  if (g0 >= num_tiles) return;  // a whole warp
  const int lane = threadIdx.x & 31;
  int32_t i = WaveFindRow(runs, num_runs, g0);
  int32_t slot = -1;
  uint64_t s = 0;
  for (int64_t g = g0; g < min(num_tiles, g0 + kDigestTilesPerWarp); ++g) {
    while (i + 1 < num_runs && runs[i + 1].first_tile <= g) ++i;
    const WaveDigestRun r = runs[i];
    if (r.slot != slot) {
      if (slot >= 0) WaveDigestFlush(s, sums + slot);
      slot = r.slot;
      s = 0;
    }
    const int64_t lo = (g - r.first_tile) * kDeltaTileBytes;
    const int64_t hi = min(r.bytes, lo + kDeltaTileBytes);
    const bool aligned = (reinterpret_cast<uintptr_t>(r.data) & 15u) == 0;
    const bool whole = aligned && hi == lo + kDeltaTileBytes;
    // The weight of the lane's first word; each step is 32 words on.
    uint64_t h = DigestWeight(r.first_key + static_cast<uint64_t>(lo + lane * kDeltaChunk));
    for (int s0 = 0; s0 < kMaskSteps; s0 += kDigestUnroll) {
      DeltaChunk c[kDigestUnroll];
#pragma unroll
      for (int u = 0; u < kDigestUnroll; ++u) {
        const int64_t off = lo + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
        if (whole) {
          const uint4 x = __ldcs(reinterpret_cast<const uint4*>(r.data + off));
          c[u] = {{x.x, x.y, x.z, x.w}};
        } else if (off < hi) {
          c[u] = DeltaLoad(r.data, off, hi, aligned);  // zeros past the end
        } else {
          c[u] = {{0, 0, 0, 0}};
        }
      }
#pragma unroll
      for (int u = 0; u < kDigestUnroll; ++u) {
        const int64_t off = lo + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
        if (off < hi) {
          s += DigestChunk(h, r.first_key + static_cast<uint64_t>(off),
                           c[u].w[0] | (static_cast<uint64_t>(c[u].w[1]) << 32),
                           c[u].w[2] | (static_cast<uint64_t>(c[u].w[3]) << 32));
        }
        h *= kDigestA32;
      }
    }
  }
  WaveDigestFlush(s, sums + slot);
}

namespace {

unsigned int GridFor(int64_t items) {
  const int64_t blocks = (items + kDeltaThreads - 1) / kDeltaThreads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 132 * 32 ? 132 * 32 : blocks));
}

}  // namespace

void LaunchTileScan(const uint32_t* tile_counts, int64_t num_tiles, uint64_t* tile_offsets,
                    uint64_t* total, cudaStream_t stream) {
  TileScanKernel<<<1, 1024, 0, stream>>>(tile_counts, num_tiles, tile_offsets, total);
}

void LaunchWaveGather(const WaveRows& msgs, int64_t num_tiles, const uint32_t* mask,
                      const uint32_t* tile_counts, const uint64_t* tile_offsets,
                      const uint8_t* vals, const uint32_t* idx, const WaveHeaders& headers,
                      cudaStream_t stream) {
  if (msgs.num == 0) num_tiles = 0;  // the headers alone
  if (num_tiles == 0 && headers.bytes == 0) return;
  const int64_t per_block = kDeltaThreads / 32;
  const int64_t need = (num_tiles + per_block - 1) / per_block;
  const auto blocks = static_cast<unsigned int>(need > 0 ? need : 1);
  WaveGatherKernel<<<blocks, kDeltaThreads, 0, stream>>>(msgs, num_tiles, mask, tile_counts,
                                                        tile_offsets, vals, idx, headers);
}

void LaunchWaveApplyCount(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles,
                          uint32_t* tile_counts, uint32_t* bad, uint32_t* bad_any,
                          cudaStream_t stream) {
  if (num_tiles == 0 || num_msgs == 0) return;
  WaveApplyCountKernel<<<static_cast<unsigned int>(num_tiles), kDeltaThreads, 0, stream>>>(
      msgs, num_msgs, tile_counts, bad, bad_any);
}

void LaunchWaveApplyCheck(const WaveMsg* msgs, int64_t num_msgs, const uint32_t* tile_counts,
                          const uint64_t* tile_offsets, uint32_t* bad, uint32_t* bad_any,
                          cudaStream_t stream) {
  if (num_msgs == 0) return;
  WaveApplyCheckKernel<<<GridFor(num_msgs), kDeltaThreads, 0, stream>>>(
      msgs, num_msgs, tile_counts, tile_offsets, bad, bad_any);
}

void LaunchWaveScatter(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles,
                       const uint64_t* tile_offsets, const uint32_t* bad_any,
                       cudaStream_t stream) {
  if (num_tiles == 0 || num_msgs == 0) return;
  WaveScatterKernel<<<static_cast<unsigned int>(num_tiles), kDeltaThreads, 0, stream>>>(
      msgs, num_msgs, tile_offsets, bad_any);
}

void LaunchWaveDigest(const WaveDigestRun* runs, int32_t num_runs, int64_t num_tiles,
                      unsigned long long* sums, cudaStream_t stream) {
  if (num_tiles == 0 || num_runs == 0) return;
  const int64_t per_block = kDeltaThreads / 32 * kDigestTilesPerWarp;
  const auto blocks = static_cast<unsigned int>((num_tiles + per_block - 1) / per_block);
  WaveDigestKernel<<<blocks, kDeltaThreads, 0, stream>>>(runs, num_runs, num_tiles, sums);
}

}  // namespace refit
