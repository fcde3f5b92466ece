// Kernel launchers for delta and verified rounds on a GPU (exec/delta/cuda:
// gpu_delta.h is the checked interface over them). Every launcher only
// enqueues work on `stream`; arguments are validated by gpu_delta.cc.
//
// Tiles: the mask kernel splits a message into tiles of kDeltaTileBytes;
// each tile's changed-word count feeds one exclusive scan, and the encode
// and apply kernels place a tile's words from its offset.
#ifndef REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_
#define REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace refit {

inline constexpr int64_t kDeltaTileBytes = 32 * 1024;

// u32 mask words per tile for words of `word_bytes`.
inline int64_t DeltaMaskWordsPerTile(int word_bytes) {
  return kDeltaTileBytes / word_bytes / 32;
}

// Sets bit i of `mask` (u32 words, LSB first; every tile's words, also past
// the end) when word i of `cur` and `snap` differ, and tile_counts[t] to the
// number of changed words of tile t.
void LaunchDeltaMask(const void* cur, const void* snap, int64_t bytes, int word_bytes,
                     uint32_t* mask, uint32_t* tile_counts, cudaStream_t stream);

// Counts the set bits of a message's bitmask (`mask_bytes` bytes, words of
// `word_bytes`) per tile into tile_counts, for applying it.
void LaunchMaskTileCounts(const uint8_t* mask, int64_t mask_bytes, int word_bytes,
                          int64_t num_tiles, uint32_t* tile_counts, cudaStream_t stream);

// tile_offsets[t] = sum of tile_counts[0, t); *total = the sum of all.
void LaunchTileScan(const uint32_t* tile_counts, int64_t num_tiles, uint64_t* tile_offsets,
                    uint64_t* total, cudaStream_t stream);

// Writes each changed word's index (u32, when `indices` is not null) and
// value (w bytes) at its rank from the mask and the tile offsets.
void LaunchDeltaGather(const void* cur, int word_bytes, int64_t num_tiles,
                       const uint8_t* mask, const uint64_t* tile_offsets, uint32_t* indices,
                       uint8_t* values, cudaStream_t stream);

// Sets *bad to 1 unless indices[0, count) increase and stay below num_words.
void LaunchCheckIndices(const uint32_t* indices, int64_t count, uint64_t num_words,
                        uint32_t* bad, cudaStream_t stream);

// target[indices[k]] = values[k] for k < count.
void LaunchScatterIndexed(const uint32_t* indices, const uint8_t* values, int64_t count,
                          int word_bytes, void* target, cudaStream_t stream);

// target[i] = the next value, for each set bit i of the message's mask.
void LaunchScatterMasked(const uint8_t* mask, int64_t mask_bytes, int word_bytes,
                         int64_t num_tiles, const uint64_t* tile_offsets,
                         const uint8_t* values, void* target, cudaStream_t stream);

// *sum += the digest terms (exec/delta/region_digest.h) of `bytes` bytes of
// `element_bytes` elements at `data`, the first at key `first_key`.
void LaunchDigest(const void* data, int64_t bytes, int element_bytes, uint64_t first_key,
                  unsigned long long* sum, cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_DELTA_KERNELS_H_
