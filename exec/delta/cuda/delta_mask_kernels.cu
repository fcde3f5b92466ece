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


// The trainer's digest in the mask pass (verified rounds): a message whose
// current bytes are one digest run from a key on a 16-byte word
// (digest_slot >= 0) is digested as it is compared, so the digest costs
// no read of its own. A thread's chunks of a tile are a fixed number of
// words apart, so past its first chunk's weight (a power) each weight is
// the last one's times a constant; bytes past the message's end read as
// zeros and add nothing. The warp adds its lanes' sums to the slot with
// one atomic per tile.
__device__ inline void WaveDigestFlush(uint64_t s, int32_t slot, unsigned long long* sums) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0 && s != 0) {
    atomicAdd(sums + slot, static_cast<unsigned long long>(s));
  }
}

// The mask pass: one warp per tile, no block-wide step. The warp reads the
// tile in steps of 512 bytes (16 per lane) of the current and snapshot
// bytes, kUnroll steps of loads in flight at once; per step each lane's
// changed words get their ranks by a warp scan, go into the tile's value
// slot while they fit (the gather then copies them instead of reading the
// current bytes again), and the lanes of a mask word OR their bits
// together. Past the message's end both sides read as zeros: no bits, but
// the tile's whole mask is written (the gather reads all of it).
// The 16-byte chunk at `off` of the message's current bytes (*a) and
// snapshot (*b): streaming 16-byte loads where the tile is whole and
// aligned, zeros past the message's end.
__device__ inline void WaveLoadPair(const WaveMsg& m, int64_t off, bool whole, bool aligned,
                                    DeltaChunk* a, DeltaChunk* b) {
  if (whole) {
    const uint4 x = __ldcs(reinterpret_cast<const uint4*>(m.cur + off));
    const uint4 y = __ldcs(reinterpret_cast<const uint4*>(m.snap + off));
    *a = {{x.x, x.y, x.z, x.w}};
    *b = {{y.x, y.y, y.z, y.w}};
  } else if (off < m.bytes) {
    *a = DeltaLoad(m.cur, off, m.bytes, aligned);
    *b = DeltaLoad(m.snap, off, m.bytes, aligned);
  } else {
    *a = {{0, 0, 0, 0}};
    *b = *a;
  }
}

// kSmem: vals and idx are the warp's own slots in shared memory (same
// capacity), copied to the tile's slots by WaveSmemSlotsOut.
template <int W, int kUnroll, bool kValues, bool kDigest, bool kSmem = false>
__device__ inline uint32_t WaveMaskTileWarp(const WaveMsg& m, int64_t tile, int64_t g,
                                            uint32_t* mask, uint8_t* vals, uint32_t* idx,
                                            unsigned long long* sums) {
  constexpr int kBits = kDeltaChunk / W;  // bits per lane per step
  constexpr int kGroup = 32 / kBits;      // lanes per mask word
  constexpr uint32_t kCap = static_cast<uint32_t>(kWaveValueBytesPerTile / W);
  const int lane = threadIdx.x & 31;
  const int64_t base = tile * kDeltaTileBytes;
  const bool aligned = WaveAligned(m.cur, m.snap);
  const bool whole = aligned && base + kDeltaTileBytes <= m.bytes;
  uint32_t* tmask = mask + g * kWaveMaskWordsPerTile;
  uint8_t* tvals = kSmem ? vals : vals + g * kWaveValueBytesPerTile;
  uint32_t* tidx = kSmem ? idx : idx != nullptr ? idx + g * kWaveIndexSlots : nullptr;
  const uint32_t icap = tidx != nullptr ? static_cast<uint32_t>(kWaveIndexSlots) : 0;
  uint32_t count = 0;  // the tile's changed words before this step (kValues: the lane's)
  const bool digest = kDigest && m.digest_slot >= 0;  // the same in the warp
  uint64_t h = 0, dsum = 0;  // the lane's next chunk's weight, its sum
  if (digest) h = DigestWeight(m.digest_key + static_cast<uint64_t>(base + lane * kDeltaChunk));
  for (int s0 = 0; s0 < kMaskSteps; s0 += kUnroll) {
    DeltaChunk a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t off = base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
      WaveLoadPair(m, off, whole, aligned, &a[u], &b[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (digest) {
        dsum += h * DigestLanes(a[u].w[0] | (static_cast<uint64_t>(a[u].w[1]) << 32),
                                a[u].w[2] | (static_cast<uint64_t>(a[u].w[3]) << 32));
        h *= kDigestA32;
      }
      const uint32_t bits = DeltaDiffBits(a[u], b[u], W);
      const uint32_t c = __popc(bits);
      if (kValues) {
        // The lane's rank among the step's changed words: those of the lanes
        // below it, one ballot per "at least j changed" (a step seldom has a
        // lane with more than two: two or three ballots, not a warp scan).
        const uint32_t below = (1u << lane) - 1u;
        uint32_t before = 0, step_total = 0;
        for (uint32_t j = 0;; ++j) {
          const uint32_t b = __ballot_sync(0xffffffffu, c > j);
          if (b == 0) break;
          before += __popc(b & below);
          step_total += __popc(b);
        }
        uint32_t r = count + before;
        uint32_t left = bits;
        // The chunk's first word, as an index into the message.
        const uint32_t word0 = static_cast<uint32_t>(
            (base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk) / W);
        while (left != 0 && r < kCap) {
          const int bit = __ffs(left) - 1;
          left &= left - 1;
          WaveStoreWord<W>(tvals + r * W, WaveWordAt(a[u], W, bit));
          if (r < icap) tidx[r] = word0 + static_cast<uint32_t>(bit);
          ++r;
        }
        count += step_total;
      } else {
        count += c;
      }
      const int64_t local = static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
      if (W <= 2) {
        // The lane's bits are whole bytes of the mask (one for BF16, two for
        // 1-byte words), the lanes' side by side: one store each.
        auto* tm = reinterpret_cast<uint8_t*>(tmask) + local / W / 8;
        if (W == 2) {
          *tm = static_cast<uint8_t>(bits);
        } else {
          *reinterpret_cast<uint16_t*>(tm) = static_cast<uint16_t>(bits);
        }
      } else {
        uint32_t word = bits << ((lane % kGroup) * kBits);
#pragma unroll
        for (int o = 1; o < kGroup; o <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, o);
        if (lane % kGroup == 0) tmask[local / W / 32] = word;
      }
    }
  }
  if (!kValues) {
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  }
  if (digest) WaveDigestFlush(dsum, m.digest_slot, sums);
  return count;  // the same in every lane
}


__device__ inline void WaveMaskTileDone(uint32_t count, int64_t g, uint32_t* tile_counts,
                                        uint64_t* total) {
  tile_counts[g] = count;
  if (count != 0) atomicAdd(reinterpret_cast<unsigned long long*>(total), count);
}

// Copies the warp's shared-memory slots (kept words: up to the slots'
// capacity) to tile g's slots, 16 bytes a lane a store.
__device__ inline void WaveSmemSlotsOut(int w, uint32_t count, int64_t g, const uint8_t* svals,
                                        const uint32_t* sidx, uint8_t* vals, uint32_t* idx) {
  const int lane = threadIdx.x & 31;
  const int64_t vb = min(static_cast<int64_t>(count) * w, kWaveValueBytesPerTile);
  const int64_t ib = min(static_cast<int64_t>(count), kWaveIndexSlots) * 4;
  __syncwarp();  // every lane's words are in shared memory
  auto* dv = reinterpret_cast<uint4*>(vals + g * kWaveValueBytesPerTile);
  const auto* sv = reinterpret_cast<const uint4*>(svals);
  for (int64_t k = lane; k < (vb + 15) / 16; k += 32) dv[k] = sv[k];
  if (idx != nullptr) {
    auto* di = reinterpret_cast<uint4*>(idx + g * kWaveIndexSlots);
    const auto* si = reinterpret_cast<const uint4*>(sidx);
    for (int64_t k = lane; k < (ib + 15) / 16; k += 32) di[k] = si[k];
  }
  __syncwarp();  // read before the warp's next tile writes them
}

template <int kUnroll, bool kValues, bool kDigest, bool kSmem = false>
__device__ inline void WaveMaskWarpAt(const WaveMsg* msgs, int32_t i, int64_t g, uint32_t* mask,
                                      uint32_t* tile_counts, uint8_t* vals, uint32_t* idx,
                                      uint64_t* totals, unsigned long long* sums,
                                      uint8_t* svals = nullptr, uint32_t* sidx = nullptr) {
  const WaveMsg m = msgs[i];
  const int64_t t = g - m.first_tile;
  uint8_t* v = kSmem ? svals : vals;
  uint32_t* x = kSmem ? sidx : idx;
  uint32_t c;
  switch (m.word) {
    case 1: c = WaveMaskTileWarp<1, kUnroll, kValues, kDigest, kSmem>(
        m, t, g, mask, v, x, sums); break;
    case 2: c = WaveMaskTileWarp<2, kUnroll, kValues, kDigest, kSmem>(
        m, t, g, mask, v, x, sums); break;
    case 4: c = WaveMaskTileWarp<4, kUnroll, kValues, kDigest, kSmem>(
        m, t, g, mask, v, x, sums); break;
    default: c = WaveMaskTileWarp<8, kUnroll, kValues, kDigest, kSmem>(
        m, t, g, mask, v, x, sums); break;
  }
  if (kSmem) WaveSmemSlotsOut(m.word, c, g, svals, sidx, vals, idx);
  if ((threadIdx.x & 31) == 0) WaveMaskTileDone(c, g, tile_counts, totals + i);
}

// Blocks an SM the warp kernels' registers must allow: four (eight warps
// each) but where eight steps of loads or the digest at four steps need
// more registers.
constexpr int WaveMaskMinBlocks(int unroll, bool digest) {
  return unroll == 8 ? 2 : (unroll == 4 && digest) ? 3 : 4;
}

// kTiles: one warp per kMaskTilesPerWarp consecutive tiles (one search for
// the first one's message), a grid of the batch's size.
constexpr int kMaskTilesPerWarp = 4;

template <int kUnroll, bool kValues, bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads, WaveMaskMinBlocks(kUnroll, kDigest)) WaveMaskTilesKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint32_t* idx, uint64_t* totals,
    unsigned long long* sums,
    unsigned long long* /*claim: a grid of the batch's size claims nothing*/) {
  const int64_t g0 =
      (static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5)) *
      kMaskTilesPerWarp;
  if (g0 >= num_tiles) return;  // a whole warp
  int32_t i = WaveFindMsg(msgs, num_msgs, g0);
  for (int64_t g = g0; g < min(num_tiles, g0 + kMaskTilesPerWarp); ++g) {
    while (i + 1 < num_msgs && msgs[i + 1].first_tile <= g) ++i;
    WaveMaskWarpAt<kUnroll, kValues, kDigest>(
        msgs, i, g, mask, tile_counts, vals, idx, totals, sums);
  }
}

// kSweep: a persistent grid (as many blocks as fit on the device at once);
// warp w of W runs tiles w, w + W, w + 2W, ...: the warps at work read one
// window of the batch, and every warp ends within a tile of the others.
// With `claim` (a counter the caller zeroed), each warp claims its next
// tile by one atomic instead: a block that becomes resident late (the SMs
// held by another kernel, NCCL's or a gather) finds the tiles taken by
// the warps at work rather than a share of its own to do after them.
// kSmem: each warp keeps its tile's words in its 8 KiB of the block's
// dynamic shared memory (kSmemSlotsBytes).
template <int kUnroll, bool kValues, bool kDigest, bool kSmem = false>
__global__ void __launch_bounds__(kDeltaThreads, WaveMaskMinBlocks(kUnroll, kDigest)) WaveMaskSweepKernel(
    const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint32_t* idx, uint64_t* totals,
    unsigned long long* sums, unsigned long long* claim) {
  extern __shared__ __align__(16) uint8_t smem_slots[];
  uint8_t* svals = nullptr;
  uint32_t* sidx = nullptr;
  if (kSmem) {
    svals = smem_slots + (threadIdx.x >> 5) * (kWaveValueBytesPerTile + kWaveIndexSlots * 4);
    sidx = reinterpret_cast<uint32_t*>(svals + kWaveValueBytesPerTile);
  }
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kDeltaThreads / 32);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kDeltaThreads / 32) + (threadIdx.x >> 5);
  auto next = [claim, warps](int64_t g) -> int64_t {
    if (claim == nullptr) return g + warps;
    unsigned long long x = 0;
    if ((threadIdx.x & 31) == 0) x = atomicAdd(claim, 1ull);
    return static_cast<int64_t>(__shfl_sync(0xffffffffu, x, 0));
  };
  for (int64_t g = claim == nullptr ? first : next(0); g < num_tiles; g = next(g)) {
    WaveMaskWarpAt<kUnroll, kValues, kDigest, kSmem>(msgs, WaveFindMsg(msgs, num_msgs, g), g,
                                                     mask, tile_counts, vals, idx, totals, sums,
                                                     svals, sidx);
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
                                         uint64_t* total, unsigned long long* sums,
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
    } else {
      WaveLoadPair(m, off, whole, aligned, &a[u], &b[u]);
    }
  }
  if (kDigest && m.digest_slot >= 0) {  // the same in the block
    constexpr uint64_t kStepWeight = DigestPow(kDigestA, kBlockStep / 16);
    uint64_t h = DigestWeight(m.digest_key + static_cast<uint64_t>(base + t * kDeltaChunk));
    uint64_t dsum = 0;
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      dsum += h * DigestLanes(a[u].w[0] | (static_cast<uint64_t>(a[u].w[1]) << 32),
                              a[u].w[2] | (static_cast<uint64_t>(a[u].w[3]) << 32));
      h *= kStepWeight;
    }
    WaveDigestFlush(dsum, m.digest_slot, sums);
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
    uint32_t* tile_counts, uint8_t* vals, uint32_t* /*idx: warp kinds only*/,
    uint64_t* totals, unsigned long long* sums, unsigned long long* /*claim: steps by the grid*/) {
  for (int64_t g = blockIdx.x; g < num_tiles; g += gridDim.x) {
    const int32_t i = WaveFindMsg(msgs, num_msgs, g);
    const WaveMsg m = msgs[i];
    const int64_t t = g - m.first_tile;
    switch (m.word) {
      case 1: WaveMaskTileBlock<1, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums); break;
      case 2: WaveMaskTileBlock<2, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums); break;
      case 4: WaveMaskTileBlock<4, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums); break;
      default: WaveMaskTileBlock<8, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums); break;
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
    uint32_t* tile_counts, uint8_t* vals, uint32_t* /*idx: warp kinds only*/,
    uint64_t* totals, unsigned long long* sums, unsigned long long* /*claim: its prefetch needs the tiles ahead*/) {
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
          m, t, g, mask, tile_counts, vals, totals + i, sums, scur, ssnap); break;
      case 2: WaveMaskTileBlock<2, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums, scur, ssnap); break;
      case 4: WaveMaskTileBlock<4, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums, scur, ssnap); break;
      default: WaveMaskTileBlock<8, kValues, kDigest>(
          m, t, g, mask, tile_counts, vals, totals + i, sums, scur, ssnap); break;
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
                            uint32_t*, uint64_t*, unsigned long long*, unsigned long long*);

// The warp kernels by steps loaded at once: 2, 4 or 8.
template <template <int, bool, bool> class K, bool D>
MaskKernel PickWarpUnroll(const WaveMaskConfig& c) {
  if (c.unroll == 8) return c.values ? K<8, true, D>::kFn : K<8, false, D>::kFn;
  if (c.unroll == 2) return c.values ? K<2, true, D>::kFn : K<2, false, D>::kFn;
  return c.values ? K<4, true, D>::kFn : K<4, false, D>::kFn;
}
template <template <int, bool, bool> class K>
MaskKernel PickWarp(const WaveMaskConfig& c, bool digest) {
  return digest ? PickWarpUnroll<K, true>(c) : PickWarpUnroll<K, false>(c);
}
template <int U, bool V, bool D>
struct SweepOf {
  static constexpr MaskKernel kFn = WaveMaskSweepKernel<U, V, D>;
};
template <int U, bool V, bool D>
struct TilesOf {
  static constexpr MaskKernel kFn = WaveMaskTilesKernel<U, V, D>;
};

// The sweep keeping its tiles' words in shared memory (when it keeps them).
template <int U, bool V, bool D>
struct SmemSweepOf {
  static constexpr MaskKernel kFn = WaveMaskSweepKernel<U, V, D, V>;
};

bool SmemSlots(const WaveMaskConfig& c) {
  return c.smem_slots && c.values && c.kind == WaveMaskKind::kSweep;
}
constexpr int kSmemSlotsBytes =
    (kDeltaThreads / 32) * static_cast<int>(kWaveValueBytesPerTile + kWaveIndexSlots * 4);

MaskKernel PickMaskKernel(const WaveMaskConfig& c, bool digest = false) {
  if (SmemSlots(c)) return PickWarp<SmemSweepOf>(c, digest);
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

int MaskSmem(const WaveMaskConfig& c) {
  return c.kind == WaveMaskKind::kBulk ? kBulkSmem : SmemSlots(c) ? kSmemSlotsBytes : 0;
}

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

bool WaveMaskKeepsIndices(const WaveMaskConfig& c) {
  return c.values && (c.kind == WaveMaskKind::kSweep || c.kind == WaveMaskKind::kTiles);
}

void LaunchWaveMask(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles,
                    const WaveMaskOut& out, cudaStream_t stream, const WaveMaskConfig& c,
                    unsigned long long* sums) {
  if (num_tiles == 0 || num_msgs == 0) return;
  const int64_t warps_per_block = kDeltaThreads / 32;
  const bool digest = sums != nullptr;
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
      msgs, num_msgs, num_tiles, out.mask, out.tile_counts, c.values ? out.vals : nullptr,
      WaveMaskKeepsIndices(c) ? out.idx : nullptr, out.totals, sums,
      c.kind == WaveMaskKind::kSweep && c.claim ? out.claim : nullptr);
}

}  // namespace refit
