// Kernel launchers for delta and verified rounds on a GPU (exec/delta/cuda:
// gpu_wave_ops.h is the checked interface over them). Every launcher only
// enqueues work on `stream`; arguments are validated by gpu_wave_ops.cc.
//
// Tiles: the mask kernel splits each message into tiles of
// kDeltaTileBytes; the tiles' changed-word counts feed one exclusive scan,
// and the encode and apply kernels place a tile's words from its offset.
#ifndef REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_
#define REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace refit {

inline constexpr int64_t kDeltaTileBytes = 32 * 1024;

// tile_offsets[t] = sum of tile_counts[0, t); *total = the sum of all.
void LaunchTileScan(const uint32_t* tile_counts, int64_t num_tiles, uint64_t* tile_offsets,
                    uint64_t* total, cudaStream_t stream);

// Batched launches: every message of a wave (or of a batch of waves) in
// one launch each. A batch's messages are WaveMsg rows, in the order of
// their first_tile: message i owns tiles [first_tile(i), first_tile(i+1)),
// the last one up to num_tiles, and the kernels find a tile's message by a
// binary search over the rows (no per-tile table). The mask scratch holds
// kWaveMaskWordsPerTile u32 per tile of the batch.
inline constexpr int64_t kWaveMaskWordsPerTile = kDeltaTileBytes / 32;  // 1-byte words
// The value slot per tile: a tile's changed words while they fit (1/8 of
// the tile: 12% of BF16 words changed, 6% of 1-byte words).
inline constexpr int64_t kWaveValueBytesPerTile = kDeltaTileBytes / 8;
// The index slot per tile: its changed words' indices in the message while
// they fit (1024: 6.2% of a tile's BF16 words, 3.1% of 1-byte words, where
// kIndices stops being the smaller encoding), so the gather copies them.
inline constexpr int64_t kWaveIndexSlots = 1024;
// The changed words of a w-byte-word tile whose values and indices the
// mask pass keeps all of (both slots fit them): up to this many the tile
// has no mask of its own (LaunchWaveMask), past it the mask is written.
template <int W>
inline constexpr int64_t kWaveSlotsCap =
    kWaveValueBytesPerTile / W < kWaveIndexSlots ? kWaveValueBytesPerTile / W : kWaveIndexSlots;
// Indices one apply tile of a kIndices message checks and scatters.
inline constexpr int64_t kWaveIndicesPerTile = 8192;

struct WaveMsg {
  const uint8_t* cur = nullptr;   // encode: current bytes; apply: payload
  const uint8_t* snap = nullptr;  // encode: snapshot
  uint8_t* out = nullptr;         // encode: payload; apply: target
  int64_t bytes = 0;              // the message's (target's) bytes
  int64_t first_tile = 0;
  int64_t changed = 0;            // encode and apply: words sent
  int32_t word = 1;
  int32_t encoding = 0;           // a DeltaEncoding
  // Encode, verified rounds: the slot the count digests the message's bytes
  // into (LaunchWaveMask), from key digest_key (a multiple of 16); -1: not.
  int32_t digest_slot = -1;
  int32_t pad = 0;
  uint64_t digest_key = 0;
};
// A tile: its message (or run) and its index in it.
struct WaveTile {
  int32_t msg = 0;
  int32_t tile = 0;
};
static_assert(sizeof(WaveMsg) == 72 && sizeof(WaveTile) == 8, "copied as bytes");

// A wave's message rows as a kernel sees them: up to kWaveInlineMsgs ride
// in the launch's own parameters (nothing to upload before the kernel;
// parameters past 4 KiB need CUDA 12.1 and Volta or newer), more are read
// from device memory.
inline constexpr int32_t kWaveInlineMsgs = 64;
struct WaveRows {
  const WaveMsg* device = nullptr;  // the rows in device memory; null: inline_rows
  int32_t num = 0;
  WaveMsg inline_rows[kWaveInlineMsgs];
};
// Rows `host[0, n)` in the launch (n at most kWaveInlineMsgs).
inline WaveRows InlineWaveRows(const WaveMsg* host, int32_t n) {
  WaveRows r;
  r.num = n;
  for (int32_t i = 0; i < n; ++i) r.inline_rows[i] = host[i];
  return r;
}
// n rows in device memory at `device`.
inline WaveRows DeviceWaveRows(const WaveMsg* device, int32_t n) {
  WaveRows r;
  r.device = device;
  r.num = n;
  return r;
}

// One digest run of a batch: its tiles (kDeltaTileBytes each) are
// [first_tile, the next run's first_tile), found on the GPU as a wave's.
struct WaveDigestRun {
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
  uint64_t first_key = 0;
  int64_t first_tile = 0;
  int32_t element_bytes = 1;
  int32_t slot = 0;
};
static_assert(sizeof(WaveDigestRun) == 40, "copied as bytes");
// Tiles of a message: encode and bitmask apply by kDeltaTileBytes of the
// message, kIndices apply by kWaveIndicesPerTile indices.
inline int64_t WaveEncodeTiles(int64_t bytes) {
  return (bytes + kDeltaTileBytes - 1) / kDeltaTileBytes;
}

// Encode, pass 1, the one pass over the current and snapshot bytes
// (delta_mask_kernels.cu): every tile's count and, while they fit, its
// changed words in order (`vals`: kWaveValueBytesPerTile a tile) and their
// indices (kWaveIndexSlots u32 a tile); the mask of changed words only for
// a tile with more than kWaveSlotsCap<word> of them (any other tile's mask
// is its indices' bits: LaunchWaveGather builds it); each tile's count is
// added to totals[its message]. Past a message's end both sides read as
// zeros. Verified
// rounds: when `sums` is given, the bytes of each message with a
// digest_slot are digested into sums[digest_slot] in the same read.
// The kernel is a persistent grid of warps (every SM full), one 32 KiB
// tile a warp at a time, claimed from a counter; each warp gathers its
// tile's changed values and indices in shared memory and writes them to
// the tile's slots at its end in 16-byte stores.
//
// The blocks of the kernel (`digest`: the one that digests too) resident
// on `device` at once (every SM full): its grid. 0 when the device cannot
// say.
int WaveMaskBlocks(int device, bool digest = false);
// Where the mask pass writes: per tile of the batch its kWaveMaskWordsPerTile
// mask words, its count, its changed values and their indices; per message
// its total in `totals_out`: host memory the device writes (pinned; with
// unified addressing its host pointer), written by the kernel's last warp,
// so the totals are on the host when the kernel ends (no copy after it).
// `totals` (a u64 a message) and `claim` (two u64: the warps' tile claims,
// the warps done) are the kernel's counters: zeroed before its first
// launch, it leaves them zeroed (a next count on them needs no memset).
struct WaveMaskOut {
  uint32_t* mask = nullptr;
  uint32_t* tile_counts = nullptr;
  uint8_t* vals = nullptr;
  uint32_t* idx = nullptr;
  uint64_t* totals = nullptr;
  unsigned long long* claim = nullptr;
  uint64_t* totals_out = nullptr;
};
void LaunchWaveMask(const WaveRows& msgs, int64_t num_tiles, const WaveMaskOut& out,
                    cudaStream_t stream, unsigned long long* sums = nullptr);
// Encode, pass 2: each kIndices / kBitmask message's payload at its `out`
// (dense messages: nothing); values from `vals` where the tile's fitted,
// else (or with vals null) read again from the current bytes; indices from
// `idx` where the tile's fitted, else from the mask. `idx` is required: a
// tile's mask is built from its indices where the mask pass wrote none.
// It also copies the wave's headers to their place (WaveHeaders).
//
// The wave's headers for the gather: up to kWaveInlineHeaderBytes in the
// launch's parameters, more from device memory (uploaded with the rows).
inline constexpr int64_t kWaveInlineHeaderBytes = 32 * kWaveInlineMsgs;
struct WaveHeaders {
  const uint8_t* device = nullptr;  // the bytes in device memory; null: inline_bytes
  uint8_t* out = nullptr;           // where they go (device memory)
  int64_t bytes = 0;
  uint8_t inline_bytes[kWaveInlineHeaderBytes];
};
void LaunchWaveGather(const WaveRows& msgs, int64_t num_tiles, const uint32_t* mask,
                      const uint32_t* tile_counts, const uint64_t* tile_offsets,
                      const uint8_t* vals, const uint32_t* idx, const WaveHeaders& headers,
                      cudaStream_t stream);
// Apply, pass 1: bitmask tiles' set bits into tile_counts; kIndices tiles'
// indices checked (bad[msg] and *bad_any set for one out of range or not
// increasing), their count 0.
void LaunchWaveApplyCount(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles,
                          uint32_t* tile_counts, uint32_t* bad, uint32_t* bad_any,
                          cudaStream_t stream);
// Apply, pass 2: a bitmask message whose set bits disagree with its count
// or that has bits past its end is bad.
void LaunchWaveApplyCheck(const WaveMsg* msgs, int64_t num_msgs, const uint32_t* tile_counts,
                          const uint64_t* tile_offsets, uint32_t* bad, uint32_t* bad_any,
                          cudaStream_t stream);
// Apply, pass 3: unless *bad_any, every changed word into its target.
void LaunchWaveScatter(const WaveMsg* msgs, int32_t num_msgs, int64_t num_tiles,
                       const uint64_t* tile_offsets, const uint32_t* bad_any,
                       cudaStream_t stream);

// sums[run.slot] += the digest of every tile of every run. One warp per
// tile, loads of four 512-byte steps in flight.
void LaunchWaveDigest(const WaveDigestRun* runs, int32_t num_runs, int64_t num_tiles,
                      unsigned long long* sums, cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_
