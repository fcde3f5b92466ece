// The mask pass of a delta encode (delta_kernels.h: LaunchWaveMask): the
// one read of a batch's current and snapshot bytes. Three kernels, chosen
// by WaveMaskConfig::kind; each writes every tile's mask words and count,
// its changed values while they fit, and adds the tile's count to its
// message's total.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/delta/cuda/delta_device.cuh"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/digest_term.h"

namespace refit {


// The trainer's digest in the mask pass (verified rounds): each thread digests
// the current bytes of its chunks into the running sums as it compares
// them, so the digest costs no read of its own. A message's digest runs
// (WaveDigestRun rows [first_run, first_run + num_runs), in stream order,
// `data` pointing into its current bytes) key each byte; a lane keeps the
// run of its chunks and its slot's running sum in registers, adds to the
// slot's sum when its slot changes, and the warp adds its sums at the end of
// each tile (one atomic when every lane has the same slot).
// The rare paths out of line, so the mask pass keeps its registers: a
// word's weight by a power, and a chunk that is cut or not on a 16-byte key.
__device__ inline uint64_t WaveDigestWeight(uint64_t word_key) {
  return DigestWeight(word_key);
}
__device__ inline uint64_t WaveDigestChunk(uint64_t h, uint64_t key, uint64_t lo,
                                                 uint64_t hi) {
  return DigestChunk(h, key, lo, hi);
}

struct WaveDigestLane {
  const WaveDigestRun* runs = nullptr;
  int32_t ri = 0, re = 0;  // the run, the end of the message's runs
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  uint64_t key = 0;
  int32_t rslot = -1;
  int32_t slot = -1;  // the slot `sum` belongs to
  uint64_t sum = 0;
  uint64_t word = ~uint64_t{0};  // the word key `h` is the weight of
  uint64_t h = 0;

  __device__ void Load() {
    if (ri >= re) return;
    const WaveDigestRun r = runs[ri];
    lo = r.data;
    hi = r.data + r.bytes;
    key = r.first_key;
    rslot = r.slot;
  }
  // The message's first run that ends past p.
  __device__ void Seek(const WaveMsg& m, const WaveDigestRun* table, const uint8_t* p) {
    runs = table;
    int32_t a = m.first_run, b = m.first_run + m.num_runs;
    re = b;
    while (a < b) {
      const int32_t mid = (a + b) / 2;
      if (table[mid].data + table[mid].bytes <= p) {
        a = mid + 1;
      } else {
        b = mid;
      }
    }
    ri = a;
    Load();
  }
  __device__ static uint64_t KeepBytes(uint64_t v, int a, int b) {  // bytes [a, b) of 8
    a = a < 0 ? 0 : a;
    b = b > 8 ? 8 : b;
    if (b <= a) return 0;
    const uint64_t below_b = b == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * b)) - 1;
    const uint64_t below_a = (uint64_t{1} << (8 * a)) - 1;
    return v & below_b & ~below_a;
  }
  // Digests the chunk `c` of bytes [p, pend) (pend - p <= 16).
  __device__ void Add(const DeltaChunk& c, const uint8_t* p, const uint8_t* pend,
                      unsigned long long* sums) {
    const uint64_t w0 = c.w[0] | (static_cast<uint64_t>(c.w[1]) << 32);
    const uint64_t w1 = c.w[2] | (static_cast<uint64_t>(c.w[3]) << 32);
    const uint8_t* at = p;
    while (at < pend) {
      while (ri < re && hi <= at) {
        ++ri;
        Load();
      }
      if (ri >= re || lo >= pend) return;
      const uint8_t* x0 = at > lo ? at : lo;
      const uint8_t* x1 = pend < hi ? pend : hi;
      if (rslot != slot) {
        if (slot >= 0 && sum != 0) atomicAdd(sums + slot, static_cast<unsigned long long>(sum));
        slot = rslot;
        sum = 0;
      }
      const int a = static_cast<int>(x0 - p), b = static_cast<int>(x1 - p);
      const bool all = a == 0 && b == 16;
      // The chunk's first word's weight: a lane's chunks are 32 words
      // apart within a run (one multiply); else a power.
      const uint64_t ck = key + static_cast<uint64_t>(p - lo);
      const uint64_t wk = ck & ~uint64_t{15};
      if (wk == word + 512 && ((wk ^ word) >> kDigestOffsetBits) == 0) {
        h *= kDigestA32;
      } else if (wk != word) {
        h = WaveDigestWeight(wk);
      }
      word = wk;
      if (all && wk == ck) {
        sum += h * DigestLanes(w0, w1);
      } else {
        sum += WaveDigestChunk(h, ck, KeepBytes(w0, a, b), KeepBytes(w1, a - 8, b - 8));
      }
      at = x1;
    }
  }
  // Warp-collective: adds the lanes' sums to their slots.
  __device__ void Flush(unsigned long long* sums) {
    const int first = __shfl_sync(0xffffffffu, slot, 0);
    if (__all_sync(0xffffffffu, slot == first || sum == 0)) {
      uint64_t s = sum;
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if ((threadIdx.x & 31) == 0 && first >= 0 && s != 0) {
        atomicAdd(sums + first, static_cast<unsigned long long>(s));
      }
    } else if (slot >= 0 && sum != 0) {
      atomicAdd(sums + slot, static_cast<unsigned long long>(sum));
    }
    sum = 0;
  }
};

// The mask pass: one warp per tile, no block-wide step. The warp reads the
// tile in steps of 512 bytes (16 per lane) of the current and snapshot
// bytes, kUnroll steps of loads in flight at once; per step each lane's
// changed words get their ranks by a warp scan, go into the tile's value
// slot while they fit (the gather then copies them instead of reading the
// current bytes again), and the lanes of a mask word OR their bits
// together. Past the message's end both sides read as zeros: no bits, but
// the tile's whole mask is written (the gather reads all of it).
template <int W, int kUnroll, bool kValues, bool kDigest>
__device__ inline uint32_t WaveMaskTileWarp(const WaveMsg& m, int64_t tile, int64_t g,
                                            uint32_t* mask, uint8_t* vals,
                                            const WaveDigestRun* runs,
                                            unsigned long long* sums) {
  constexpr int kBits = kDeltaChunk / W;  // bits per lane per step
  constexpr int kGroup = 32 / kBits;      // lanes per mask word
  constexpr uint32_t kCap = static_cast<uint32_t>(kWaveValueBytesPerTile / W);
  const int lane = threadIdx.x & 31;
  const int64_t base = tile * kDeltaTileBytes;
  const bool aligned = WaveAligned(m.cur, m.snap);
  const bool whole = aligned && base + kDeltaTileBytes <= m.bytes;
  uint32_t* tmask = mask + g * kWaveMaskWordsPerTile;
  uint8_t* tvals = vals + g * kWaveValueBytesPerTile;
  uint32_t count = 0;  // the tile's changed words before this step (kValues: the lane's)
  const bool digest = kDigest && m.num_runs > 0;  // the same in the warp
  WaveDigestLane dl;
  if (digest) dl.Seek(m, runs, m.cur + base + lane * kDeltaChunk);
  for (int s0 = 0; s0 < kMaskSteps; s0 += kUnroll) {
    DeltaChunk a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t off = base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
      if (whole) {
        const uint4 x = __ldcs(reinterpret_cast<const uint4*>(m.cur + off));
        const uint4 y = __ldcs(reinterpret_cast<const uint4*>(m.snap + off));
        a[u] = {{x.x, x.y, x.z, x.w}};
        b[u] = {{y.x, y.y, y.z, y.w}};
      } else if (off < m.bytes) {
        a[u] = DeltaLoad(m.cur, off, m.bytes, aligned);
        b[u] = DeltaLoad(m.snap, off, m.bytes, aligned);
      } else {
        a[u] = {{0, 0, 0, 0}};
        b[u] = a[u];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (digest) {
        const int64_t off = base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
        if (off < m.bytes) {
          const int64_t end = off + kDeltaChunk < m.bytes ? off + kDeltaChunk : m.bytes;
          dl.Add(a[u], m.cur + off, m.cur + end, sums);
        }
      }
      const uint32_t bits = DeltaDiffBits(a[u], b[u], W);
      const uint32_t c = __popc(bits);
      if (kValues) {
        uint32_t inc = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t y = __shfl_up_sync(0xffffffffu, inc, o);
          if (lane >= o) inc += y;
        }
        const uint32_t step_total = __shfl_sync(0xffffffffu, inc, 31);
        uint32_t r = count + inc - c;
        uint32_t left = bits;
        while (left != 0 && r < kCap) {
          const int bit = __ffs(left) - 1;
          left &= left - 1;
          WaveStoreWord<W>(tvals + r * W, WaveWordAt(a[u], W, bit));
          ++r;
        }
        count += step_total;
      } else {
        count += c;
      }
      uint32_t word = bits << ((lane % kGroup) * kBits);
#pragma unroll
      for (int o = 1; o < kGroup; o <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, o);
      if (lane % kGroup == 0) {
        const int64_t local = static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
        tmask[local / W / 32] = word;
      }
    }
  }
  if (!kValues) {
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  }
  if (digest) dl.Flush(sums);
  return count;  // the same in every lane
}


__device__ inline void WaveMaskTileDone(uint32_t count, int64_t g, uint32_t* tile_counts,
                                        uint64_t* total) {
  tile_counts[g] = count;
  if (count != 0) atomicAdd(reinterpret_cast<unsigned long long*>(total), count);
}

template <int kUnroll, bool kValues, bool kDigest>
__device__ inline void WaveMaskWarpAt(const WaveMsg* msgs, int32_t i, int64_t g, uint32_t* mask,
                                      uint32_t* tile_counts, uint8_t* vals, uint64_t* totals,
                                      const WaveDigestRun* runs, unsigned long long* sums) {
  const WaveMsg m = msgs[i];
  const int64_t t = g - m.first_tile;
  uint32_t c;
  switch (m.word) {
    case 1: c = WaveMaskTileWarp<1, kUnroll, kValues, kDigest>(
        m, t, g, mask, vals, runs, sums); break;
    case 2: c = WaveMaskTileWarp<2, kUnroll, kValues, kDigest>(
        m, t, g, mask, vals, runs, sums); break;
    case 4: c = WaveMaskTileWarp<4, kUnroll, kValues, kDigest>(
        m, t, g, mask, vals, runs, sums); break;
    default: c = WaveMaskTileWarp<8, kUnroll, kValues, kDigest>(
        m, t, g, mask, vals, runs, sums); break;
  }
  if ((threadIdx.x & 31) == 0) WaveMaskTileDone(c, g, tile_counts, totals + i);
}

// kTiles: one warp per kMaskTilesPerWarp consecutive tiles (one search for
// the first one's message), a grid of the batch's size.
constexpr int kMaskTilesPerWarp = 4;

template <int kUnroll, bool kValues, bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads, kDigest ? (kUnroll == 2 ? 3 : 2) : 1) WaveMaskTilesKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint64_t* totals, const WaveDigestRun* runs,
    unsigned long long* sums) {
  const int64_t g0 =
      (static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5)) *
      kMaskTilesPerWarp;
  if (g0 >= num_tiles) return;  // a whole warp
  int32_t i = WaveFindMsg(msgs, num_msgs, g0);
  for (int64_t g = g0; g < min(num_tiles, g0 + kMaskTilesPerWarp); ++g) {
    while (i + 1 < num_msgs && msgs[i + 1].first_tile <= g) ++i;
    WaveMaskWarpAt<kUnroll, kValues, kDigest>(
        msgs, i, g, mask, tile_counts, vals, totals, runs, sums);
  }
}

// kSweep: a persistent grid (as many blocks as fit on the device at once);
// warp w of W runs tiles w, w + W, w + 2W, ...: the warps at work read one
// window of the batch, and every warp ends within a tile of the others.
template <int kUnroll, bool kValues, bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads, kDigest ? (kUnroll == 2 ? 3 : 2) : 1) WaveMaskSweepKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint64_t* totals, const WaveDigestRun* runs,
    unsigned long long* sums) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kDeltaThreads / 32);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5);
       g < num_tiles; g += warps) {
    WaveMaskWarpAt<kUnroll, kValues, kDigest>(msgs, WaveFindMsg(msgs, num_msgs, g), g, mask,
                                     tile_counts, vals, totals, runs, sums);
  }
}

// kBlock: one block per tile, a persistent grid stepping over the tiles.
// Each thread loads its 8 chunks of each side at once (chunk u of thread t
// at u * 4096 + 16 t: every load of the block is 4 KiB in a row), then the
// ranks of its changed words in tile order come from one block scan of
// its 8 chunk counts, packed four 16-bit fields to a word (a tile's chunk
// u holds at most 4096 changed words, so no field carries into the next).
template <int W, bool kValues, bool kDigest>
__device__ inline void WaveMaskTileBlock(const WaveMsg& m, int64_t tile, int64_t g,
                                         uint32_t* mask, uint32_t* tile_counts, uint8_t* vals,
                                         uint64_t* total, const WaveDigestRun* runs,
                                         unsigned long long* sums,
                                         const uint8_t* scur = nullptr,
                                         const uint8_t* ssnap = nullptr) {
  constexpr int kBits = kDeltaChunk / W;  // bits per chunk
  constexpr int kGroup = 32 / kBits;      // lanes per mask word
  constexpr int kSub = kDeltaChunksPerThread;
  constexpr int kBlockStep = kDeltaThreads * kDeltaChunk;
  constexpr uint32_t kCap = static_cast<uint32_t>(kWaveValueBytesPerTile / W);
  const int t = threadIdx.x;
  const int lane = t & 31;
  const int64_t base = tile * kDeltaTileBytes;
  const bool aligned = WaveAligned(m.cur, m.snap);
  const bool whole = aligned && base + kDeltaTileBytes <= m.bytes;
  DeltaChunk a[kSub], b[kSub];
#pragma unroll
  for (int u = 0; u < kSub; ++u) {
    const int64_t off = base + static_cast<int64_t>(u) * kBlockStep + t * kDeltaChunk;
    if (scur != nullptr) {  // the whole tile in shared memory (kBulk)
      const uint4 x = *reinterpret_cast<const uint4*>(scur + (off - base));
      const uint4 y = *reinterpret_cast<const uint4*>(ssnap + (off - base));
      a[u] = {{x.x, x.y, x.z, x.w}};
      b[u] = {{y.x, y.y, y.z, y.w}};
    } else if (whole) {
      const uint4 x = __ldcs(reinterpret_cast<const uint4*>(m.cur + off));
      const uint4 y = __ldcs(reinterpret_cast<const uint4*>(m.snap + off));
      a[u] = {{x.x, x.y, x.z, x.w}};
      b[u] = {{y.x, y.y, y.z, y.w}};
    } else if (off < m.bytes) {
      a[u] = DeltaLoad(m.cur, off, m.bytes, aligned);
      b[u] = DeltaLoad(m.snap, off, m.bytes, aligned);
    } else {
      a[u] = {{0, 0, 0, 0}};
      b[u] = a[u];
    }
  }
  if (kDigest && m.num_runs > 0) {  // the same in the block
    WaveDigestLane dl;
    dl.Seek(m, runs, m.cur + base + t * kDeltaChunk);
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      const int64_t off = base + static_cast<int64_t>(u) * kBlockStep + t * kDeltaChunk;
      if (off < m.bytes) {
        const int64_t end = off + kDeltaChunk < m.bytes ? off + kDeltaChunk : m.bytes;
        dl.Add(a[u], m.cur + off, m.cur + end, sums);
      }
    }
    dl.Flush(sums);
  }
  uint32_t* tmask = mask + g * kWaveMaskWordsPerTile;
  uint32_t bits[kSub];
  uint64_t packed[2] = {0, 0};
#pragma unroll
  for (int u = 0; u < kSub; ++u) {
    bits[u] = DeltaDiffBits(a[u], b[u], W);
    packed[u / 4] |= static_cast<uint64_t>(__popc(bits[u])) << (16 * (u % 4));
    uint32_t word = bits[u] << ((lane % kGroup) * kBits);
#pragma unroll
    for (int o = 1; o < kGroup; o <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, o);
    if (lane % kGroup == 0) tmask[(u * kBlockStep + t * kDeltaChunk) / W / 32] = word;
  }
  uint64_t all[2];
  const uint64_t before0 = BlockExclusiveScan<uint64_t>(packed[0], &all[0]);
  const uint64_t before1 = BlockExclusiveScan<uint64_t>(packed[1], &all[1]);
  uint32_t run = 0;  // changed words of the tile's chunks u' < u
#pragma unroll
  for (int u = 0; u < kSub; ++u) {
    const int sh = 16 * (u % 4);
    if (kValues) {
      uint32_t r = run + static_cast<uint32_t>(((u < 4 ? before0 : before1) >> sh) & 0xffffu);
      uint32_t left = bits[u];
      uint8_t* tvals = vals + g * kWaveValueBytesPerTile;
      while (left != 0 && r < kCap) {
        const int bit = __ffs(left) - 1;
        left &= left - 1;
        WaveStoreWord<W>(tvals + r * W, WaveWordAt(a[u], W, bit));
        ++r;
      }
    }
    run += static_cast<uint32_t>((all[u / 4] >> sh) & 0xffffu);
  }
  if (t == 0) WaveMaskTileDone(run, g, tile_counts, total);
}

template <bool kValues, bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads) WaveMaskBlockKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint64_t* totals, const WaveDigestRun* runs,
    unsigned long long* sums) {
  for (int64_t g = blockIdx.x; g < num_tiles; g += gridDim.x) {
    const int32_t i = WaveFindMsg(msgs, num_msgs, g);
    const WaveMsg m = msgs[i];
    const int64_t t = g - m.first_tile;
    switch (m.word) {
      case 1: WaveMaskTileBlock<1, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums); break;
      case 2: WaveMaskTileBlock<2, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums); break;
      case 4: WaveMaskTileBlock<4, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums); break;
      default: WaveMaskTileBlock<8, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums); break;
    }
  }
}


// kBulk: kBlock's tiles, each whole tile's current and snapshot bytes
// brought into shared memory by two bulk copies (the Hopper copy engine,
// cp.async.bulk, completing on an mbarrier), kBulkStages tiles ahead, so
// the loads in flight are not bounded by registers; a tile that is not
// whole (a message's end, bytes not 16-aligned) is read as kBlock reads it.
constexpr int kBulkStages = 3;
constexpr int kBulkSmem = kBulkStages * 2 * static_cast<int>(kDeltaTileBytes);

__device__ inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline bool WaveTileWhole(const WaveMsg& m, int64_t tile) {
  return WaveAligned(m.cur, m.snap) && (tile + 1) * kDeltaTileBytes <= m.bytes;
}

// Thread 0: arms `bar` for a tile's two copies and starts them.
__device__ inline void WaveBulkLoad(uint8_t* scur, uint8_t* ssnap, const WaveMsg& m, int64_t tile,
                                    uint64_t* bar) {
  const int64_t base = tile * kDeltaTileBytes;
  // Earlier generic reads of these buffers come before the async writes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)),
               "r"(static_cast<uint32_t>(2 * kDeltaTileBytes))
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddr(scur)),
      "l"(m.cur + base), "r"(static_cast<uint32_t>(kDeltaTileBytes)), "r"(SmemAddr(bar))
      : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddr(ssnap)),
      "l"(m.snap + base), "r"(static_cast<uint32_t>(kDeltaTileBytes)), "r"(SmemAddr(bar))
      : "memory");
}

__device__ inline void WaveBulkWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAVE_BULK_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAVE_BULK_WAIT_%=;\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}

template <bool kValues, bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads) WaveMaskBulkKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint64_t* totals, const WaveDigestRun* runs,
    unsigned long long* sums) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kBulkStages];
  const int64_t G = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kBulkStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(&bars[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int s = 0; s < kBulkStages; ++s) {
      const int64_t g = blockIdx.x + s * G;
      if (g >= num_tiles) break;
      const WaveMsg m = msgs[WaveFindMsg(msgs, num_msgs, g)];
      if (WaveTileWhole(m, g - m.first_tile)) {
        uint8_t* st = smem + s * 2 * kDeltaTileBytes;
        WaveBulkLoad(st, st + kDeltaTileBytes, m, g - m.first_tile, &bars[s]);
      }
    }
  }
  __syncthreads();
  uint32_t phases = 0;  // bit s: the parity of stage s's next completion
  int k = 0;
  for (int64_t g = blockIdx.x; g < num_tiles; g += G, ++k) {
    const int s = k % kBulkStages;
    const int32_t i = WaveFindMsg(msgs, num_msgs, g);
    const WaveMsg m = msgs[i];
    const int64_t t = g - m.first_tile;
    const uint8_t* scur = nullptr;
    const uint8_t* ssnap = nullptr;
    if (WaveTileWhole(m, t)) {
      WaveBulkWait(&bars[s], (phases >> s) & 1u);
      phases ^= 1u << s;
      scur = smem + s * 2 * kDeltaTileBytes;
      ssnap = scur + kDeltaTileBytes;
    }
    switch (m.word) {
      case 1: WaveMaskTileBlock<1, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums, scur, ssnap); break;
      case 2: WaveMaskTileBlock<2, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums, scur, ssnap); break;
      case 4: WaveMaskTileBlock<4, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums, scur, ssnap); break;
      default: WaveMaskTileBlock<8, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, runs, sums, scur, ssnap); break;
    }
    __syncthreads();  // every thread is done with stage s
    const int64_t next = g + kBulkStages * G;
    if (threadIdx.x == 0 && next < num_tiles) {
      const WaveMsg n = msgs[WaveFindMsg(msgs, num_msgs, next)];
      if (WaveTileWhole(n, next - n.first_tile)) {
        uint8_t* st = smem + s * 2 * kDeltaTileBytes;
        WaveBulkLoad(st, st + kDeltaTileBytes, n, next - n.first_tile, &bars[s]);
      }
    }
  }
}

namespace {

using MaskKernel = void (*)(const WaveMsg*, int32_t, int64_t, uint32_t*, uint32_t*, uint8_t*,
                            uint64_t*, const WaveDigestRun*, unsigned long long*);

// The digesting warp kernels load half the steps at once: two at three
// blocks an SM (unroll 4), four at two (unroll 8).
template <template <int, bool, bool> class K>
MaskKernel PickWarp(const WaveMaskConfig& c, bool digest) {
  if (digest && c.unroll == 8) return c.values ? K<4, true, true>::kFn : K<4, false, true>::kFn;
  if (digest) return c.values ? K<2, true, true>::kFn : K<2, false, true>::kFn;
  if (c.unroll == 8) return c.values ? K<8, true, false>::kFn : K<8, false, false>::kFn;
  return c.values ? K<4, true, false>::kFn : K<4, false, false>::kFn;
}
template <int U, bool V, bool D>
struct SweepOf {
  static constexpr MaskKernel kFn = WaveMaskSweepKernel<U, V, D>;
};
template <int U, bool V, bool D>
struct TilesOf {
  static constexpr MaskKernel kFn = WaveMaskTilesKernel<U, V, D>;
};

MaskKernel PickMaskKernel(const WaveMaskConfig& c, bool digest = false) {
  switch (c.kind) {
    case WaveMaskKind::kTiles:
      return PickWarp<TilesOf>(c, digest);
    case WaveMaskKind::kBlock:
      if (digest) {
        return c.values ? WaveMaskBlockKernel<true, true> : WaveMaskBlockKernel<false, true>;
      }
      return c.values ? WaveMaskBlockKernel<true, false> : WaveMaskBlockKernel<false, false>;
    case WaveMaskKind::kBulk:
      if (digest) {
        return c.values ? WaveMaskBulkKernel<true, true> : WaveMaskBulkKernel<false, true>;
      }
      return c.values ? WaveMaskBulkKernel<true, false> : WaveMaskBulkKernel<false, false>;
    default:
      return PickWarp<SweepOf>(c, digest);
  }
}

int MaskSmem(const WaveMaskConfig& c) { return c.kind == WaveMaskKind::kBulk ? kBulkSmem : 0; }

// The bulk kernel's shared memory is past the default 48 KiB: allowed once
// per kernel (cheap to repeat).
cudaError_t AllowSmem(MaskKernel k, const WaveMaskConfig& c) {
  if (MaskSmem(c) == 0) return cudaSuccess;
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(k),
                              cudaFuncAttributeMaxDynamicSharedMemorySize, MaskSmem(c));
}

}  // namespace

namespace {

int ResidentBlocks(int device, MaskKernel k, const WaveMaskConfig& c) {
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      AllowSmem(k, c) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(k),
                                                    kDeltaThreads, MaskSmem(c)) != cudaSuccess) {
    return 0;
  }
  return sms * per_sm;
}

}  // namespace

int WaveMaskBlocks(int device, const WaveMaskConfig& c, bool digest) {
  return ResidentBlocks(device, PickMaskKernel(c, digest), c);
}

void LaunchWaveMask(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
                    uint32_t* tile_counts, uint8_t* vals, uint64_t* totals, cudaStream_t stream,
                    const WaveMaskConfig& c, const WaveDigestRun* runs,
                    unsigned long long* sums) {
  if (num_tiles == 0 || num_msgs == 0) return;
  const int64_t warps_per_block = kDeltaThreads / 32;
  const bool digest = sums != nullptr && runs != nullptr;
  const MaskKernel k = PickMaskKernel(c, digest);
  int64_t blocks = 0;
  if (c.kind == WaveMaskKind::kTiles) {
    blocks = (num_tiles + warps_per_block * kMaskTilesPerWarp - 1) /
             (warps_per_block * kMaskTilesPerWarp);
  } else {
    const int64_t need = c.kind == WaveMaskKind::kBlock || c.kind == WaveMaskKind::kBulk
                             ? num_tiles
                             : (num_tiles + warps_per_block - 1) / warps_per_block;
    int device = 0;
    int grid = c.blocks;
    if (grid <= 0 && cudaGetDevice(&device) == cudaSuccess) grid = ResidentBlocks(device, k, c);
    blocks = grid > 0 && grid < need ? grid : need;
  }
  if (AllowSmem(k, c) != cudaSuccess) return;  // the launch error stays for cudaGetLastError
  k<<<static_cast<unsigned int>(blocks), kDeltaThreads, MaskSmem(c), stream>>>(
      msgs, num_msgs, num_tiles, mask, tile_counts, vals, totals, runs, digest ? sums : nullptr);
}

}  // namespace refit
