// The mask pass of a delta encode (delta_kernels.h: LaunchWaveMask): the
// one read of a batch's current and snapshot bytes. One kernel (with and
// without the digest): a persistent grid of warps, one tile a warp at a
// time, that writes every tile's mask words and count, its changed values
// and their indices while they fit, and adds the tile's count to its
// message's total.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "exec/delta/cuda/delta_device.cuh"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/digest_term.h"

namespace refit {

namespace {

// 512-byte warp steps loaded at once (16 bytes a lane each side).
constexpr int kMaskUnroll = 4;

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

// One tile by one warp. The warp reads the tile in steps of 512 bytes (16
// per lane) of the current and snapshot bytes, kMaskUnroll steps of loads
// in flight at once; per step each lane's changed words get their ranks
// by ballots and go, with their indices, into the warp's slots in shared
// memory (`vals`, `idx`) while they fit (the gather then copies them
// instead of reading the current bytes again), and the lanes of a mask
// word OR their bits together. The mask is written only for a tile whose
// changed words outgrow the slots (kWaveSlotsCap): from the step where
// they do, and at the tile's end the steps before it from the slot;
// the gather rebuilds any other tile's mask from its indices, so a sparse
// tile costs no mask write. Past the message's end both sides read as
// zeros: no bits. Returns the tile's changed words, the same in every
// lane.
template <int W, bool kDigest>
__device__ inline uint32_t WaveMaskTileWarp(const WaveMsg& m, int64_t tile, int64_t g,
                                            uint32_t* mask, uint8_t* vals, uint32_t* idx,
                                            unsigned long long* sums) {
  constexpr int kBits = kDeltaChunk / W;  // bits per lane per step
  constexpr int kGroup = 32 / kBits;      // lanes per mask word
  constexpr uint32_t kCap = static_cast<uint32_t>(kWaveValueBytesPerTile / W);
  constexpr uint32_t kIdxCap = static_cast<uint32_t>(kWaveIndexSlots);
  const int lane = threadIdx.x & 31;
  const int64_t base = tile * kDeltaTileBytes;
  const bool aligned = WaveAligned(m.cur, m.snap);
  const bool whole = aligned && base + kDeltaTileBytes <= m.bytes;
  uint32_t* tmask = mask + g * kWaveMaskWordsPerTile;
  uint32_t count = 0;  // the tile's changed words before this step
  // The step whose words outgrew the slots (-1: none yet) and the words
  // before it (all in the index slot).
  int cross = -1;
  uint32_t before_cross = 0;
  const bool digest = kDigest && m.digest_slot >= 0;  // the same in the warp
  uint64_t h = 0, dsum = 0;  // the lane's next chunk's weight, its sum
  if (digest) h = DigestWeight(m.digest_key + static_cast<uint64_t>(base + lane * kDeltaChunk));
  for (int s0 = 0; s0 < kMaskSteps; s0 += kMaskUnroll) {
    DeltaChunk a[kMaskUnroll], b[kMaskUnroll];
#pragma unroll
    for (int u = 0; u < kMaskUnroll; ++u) {
      const int64_t off = base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
      WaveLoadPair(m, off, whole, aligned, &a[u], &b[u]);
    }
#pragma unroll
    for (int u = 0; u < kMaskUnroll; ++u) {
      if (digest) {
        dsum += h * DigestLanes(a[u].w[0] | (static_cast<uint64_t>(a[u].w[1]) << 32),
                                a[u].w[2] | (static_cast<uint64_t>(a[u].w[3]) << 32));
        h *= kDigestA32;
      }
      const uint32_t bits = DeltaDiffBits(a[u], b[u], W);
      const uint32_t c = __popc(bits);
      // The lane's rank among the step's changed words: those of the lanes
      // below it, one ballot per "at least j changed" (a step seldom has a
      // lane with more than two: two or three ballots, not a warp scan).
      const uint32_t below = (1u << lane) - 1u;
      uint32_t before = 0, step_total = 0;
      for (uint32_t j = 0;; ++j) {
        const uint32_t bal = __ballot_sync(0xffffffffu, c > j);
        if (bal == 0) break;
        before += __popc(bal & below);
        step_total += __popc(bal);
      }
      uint32_t r = count + before;
      uint32_t left = bits;
      // The chunk's first word, as an index into the message.
      const uint32_t word0 = static_cast<uint32_t>(
          (base + static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk) / W);
      while (left != 0 && r < kCap) {
        const int bit = __ffs(left) - 1;
        left &= left - 1;
        WaveStoreWord<W>(vals + r * W, WaveWordAt(a[u], W, bit));
        if (r < kIdxCap) idx[r] = word0 + static_cast<uint32_t>(bit);
        ++r;
      }
      if (cross < 0 && count + step_total > static_cast<uint32_t>(kWaveSlotsCap<W>)) {
        cross = s0 + u;
        before_cross = count;
      }
      count += step_total;
      const int64_t local = static_cast<int64_t>(s0 + u) * kMaskStep + lane * kDeltaChunk;
      if (cross < 0) {
        // Every changed word so far is in the index slot: no mask word.
      } else if (W <= 2) {
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
  // The steps before the slots overflowed: their words are the first
  // before_cross indices of the slot.
  if (cross > 0) {
    WaveMaskFromIndices(idx, before_cross, static_cast<uint32_t>(base / W),
                        cross * (kMaskStep / W / 32), tmask);
  }
  if (digest) WaveDigestFlush(dsum, m.digest_slot, sums);
  return count;
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
  auto* di = reinterpret_cast<uint4*>(idx + g * kWaveIndexSlots);
  const auto* si = reinterpret_cast<const uint4*>(sidx);
  for (int64_t k = lane; k < (ib + 15) / 16; k += 32) di[k] = si[k];
  __syncwarp();  // read before the warp's next tile writes them
}

template <bool kDigest>
__device__ inline void WaveMaskWarpAt(const WaveMsg* msgs, int32_t i, int64_t g, uint32_t* mask,
                                      uint32_t* tile_counts, uint8_t* vals, uint32_t* idx,
                                      uint64_t* totals, unsigned long long* sums,
                                      uint8_t* svals, uint32_t* sidx) {
  const WaveMsg m = msgs[i];
  const int64_t t = g - m.first_tile;
  uint32_t c;
  switch (m.word) {
    case 1: c = WaveMaskTileWarp<1, kDigest>(m, t, g, mask, svals, sidx, sums); break;
    case 2: c = WaveMaskTileWarp<2, kDigest>(m, t, g, mask, svals, sidx, sums); break;
    case 4: c = WaveMaskTileWarp<4, kDigest>(m, t, g, mask, svals, sidx, sums); break;
    default: c = WaveMaskTileWarp<8, kDigest>(m, t, g, mask, svals, sidx, sums); break;
  }
  WaveSmemSlotsOut(m.word, c, g, svals, sidx, vals, idx);
  if ((threadIdx.x & 31) == 0) WaveMaskTileDone(c, g, tile_counts, totals + i);
}

// Each warp's slots in the block's dynamic shared memory.
constexpr int kWarpSlotsBytes = static_cast<int>(kWaveValueBytesPerTile + kWaveIndexSlots * 4);
constexpr int kMaskSmemBytes = (kDeltaThreads / 32) * kWarpSlotsBytes;

// A persistent grid (as many blocks as fit on the device at once); each
// warp claims its next tile from claim[0] by one atomic, so a block that
// becomes resident late (the SMs held by another kernel, NCCL's or a
// gather) finds the tiles taken by the warps at work rather than a share
// of its own to do after them. Blocks an SM: four (eight warps each),
// three where the digest needs more registers. The rows are read where
// they are (__grid_constant__: the launch's parameters, not a copy of
// them per thread). The last warp to run out of tiles (claim[1] counts
// them) writes the totals to totals_out and zeroes the counters.
template <bool kDigest>
__global__ void __launch_bounds__(kDeltaThreads, kDigest ? 3 : 4) WaveMaskSweepKernel(
    const __grid_constant__ WaveRows rows, int64_t num_tiles, uint32_t* mask,
    uint32_t* tile_counts, uint8_t* vals, uint32_t* idx, uint64_t* totals,
    unsigned long long* sums, unsigned long long* claim, uint64_t* totals_out) {
  extern __shared__ __align__(16) uint8_t smem_slots[];
  uint8_t* svals = smem_slots + (threadIdx.x >> 5) * kWarpSlotsBytes;
  uint32_t* sidx = reinterpret_cast<uint32_t*>(svals + kWaveValueBytesPerTile);
  const WaveMsg* msgs = rows.device != nullptr ? rows.device : rows.inline_rows;
  const int lane = threadIdx.x & 31;
  auto next = [claim, lane]() -> int64_t {
    unsigned long long x = 0;
    if (lane == 0) x = atomicAdd(claim, 1ull);
    return static_cast<int64_t>(__shfl_sync(0xffffffffu, x, 0));
  };
  for (int64_t g = next(); g < num_tiles; g = next()) {
    WaveMaskWarpAt<kDigest>(msgs, WaveFindMsg(msgs, rows.num, g), g, mask, tile_counts, vals,
                            idx, totals, sums, svals, sidx);
  }
  // Lane 0 added the warp's counts to the totals: fenced before the warp
  // counts itself done.
  unsigned long long done = 0;
  if (lane == 0) {
    __threadfence();
    done = atomicAdd(claim + 1, 1ull);
  }
  done = __shfl_sync(0xffffffffu, done, 0);
  const unsigned long long warps = static_cast<unsigned long long>(gridDim.x) * (blockDim.x / 32);
  if (done + 1 != warps) return;
  // Every other warp is done: the totals are whole, and no warp claims again.
  __threadfence();
  for (int32_t i = lane; i < rows.num; i += 32) {
    const uint64_t t = atomicExch(reinterpret_cast<unsigned long long*>(totals + i), 0ull);
    if (totals_out != nullptr) totals_out[i] = t;
  }
  __threadfence_system();  // the totals on the host before the kernel ends
  if (lane == 0) {
    atomicExch(claim, 0ull);
    atomicExch(claim + 1, 0ull);
  }
}

using MaskKernel = void (*)(WaveRows, int64_t, uint32_t*, uint32_t*, uint8_t*, uint32_t*,
                            uint64_t*, unsigned long long*, unsigned long long*, uint64_t*);

MaskKernel PickMaskKernel(bool digest) {
  return digest ? WaveMaskSweepKernel<true> : WaveMaskSweepKernel<false>;
}

// The slots' shared memory is past the default 48 KiB: allowed once per
// kernel (cheap to repeat).
cudaError_t AllowSmem(MaskKernel k) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(k),
                              cudaFuncAttributeMaxDynamicSharedMemorySize, kMaskSmemBytes);
}

int ResidentBlocks(int device, MaskKernel k) {
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      AllowSmem(k) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(k),
                                                    kDeltaThreads, kMaskSmemBytes) != cudaSuccess) {
    return 0;
  }
  return sms * per_sm;
}

// ResidentBlocks, asked once per device and kernel (its shared memory
// allowed by then): the launch on a count's path makes no queries. 0 (asked
// again next time) when the device cannot say.
constexpr int kCachedDevices = 64;
std::atomic<int> resident_cache[2][kCachedDevices];

int CachedResidentBlocks(int device, bool digest) {
  if (device < 0 || device >= kCachedDevices) return ResidentBlocks(device, PickMaskKernel(digest));
  std::atomic<int>& c = resident_cache[digest ? 1 : 0][device];
  int n = c.load(std::memory_order_acquire);
  if (n > 0) return n;
  n = ResidentBlocks(device, PickMaskKernel(digest));
  if (n > 0) c.store(n, std::memory_order_release);
  return n;
}

}  // namespace

int WaveMaskBlocks(int device, bool digest) { return CachedResidentBlocks(device, digest); }

void LaunchWaveMask(const WaveRows& msgs, int64_t num_tiles, const WaveMaskOut& out,
                    cudaStream_t stream, unsigned long long* sums) {
  if (num_tiles == 0 || msgs.num == 0) return;
  const int64_t warps_per_block = kDeltaThreads / 32;
  const bool digest = sums != nullptr;
  const MaskKernel k = PickMaskKernel(digest);
  const int64_t need = (num_tiles + warps_per_block - 1) / warps_per_block;
  int device = 0;
  int grid = 0;
  if (cudaGetDevice(&device) == cudaSuccess) grid = CachedResidentBlocks(device, digest);
  const int64_t blocks = grid > 0 && grid < need ? grid : need;
  // Without a cached grid the shared memory may not be allowed yet.
  if (grid == 0 && AllowSmem(k) != cudaSuccess) return;  // the error stays for cudaGetLastError
  k<<<static_cast<unsigned int>(blocks), kDeltaThreads, kMaskSmemBytes, stream>>>(
      msgs, num_tiles, out.mask, out.tile_counts, out.vals, out.idx, out.totals, sums, out.claim,
      out.totals_out);
}

}  // namespace refit
