// Kernel launchers for the apply of a staged round on a GPU
// (client/staged_buffers.h): the 2-byte words in which a staging copy
// differs from the live buffer it stages are listed before the engine
// pauses (one read of both), and the pause writes only those words. Every
// launcher only enqueues work on `stream`; client/cuda_staging_memory.cc
// checks the arguments.
//
// Work is cut into tiles of kChangedTileBytes of a pair. A tile whose
// changed words are few (at most kChangedListedMax) lists them, one u32
// entry each (the word's index in the tile << 16 | its staged value); a
// tile with more, or one that no longer fits the list, is copied whole
// during the pause.
#ifndef REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
#define REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace refit {

inline constexpr int64_t kChangedTileBytes = 16 * 1024;
// Listed words per tile at most (1/8 of its words): past it, the tile's
// 32-byte sectors are nearly all touched anyway and a copy costs less.
inline constexpr uint32_t kChangedListedMax = kChangedTileBytes / 2 / 8;
// ChangedTile::count of a tile copied whole.
inline constexpr uint32_t kChangedTileWhole = 0xFFFFFFFFu;

// One staged buffer: `staging` is the copy of `live` (both 16-byte
// aligned, `bytes` even); its tiles are [first_tile, the next pair's).
struct ChangedPair {
  char* live = nullptr;
  const char* staging = nullptr;
  int64_t bytes = 0;
  int64_t first_tile = 0;
};
// One tile as the find left it: its live address and bytes; count 0
// (unchanged), kChangedTileWhole (src: its staging address) or the number
// of entries listed from entry `src` on.
struct ChangedTile {
  uint64_t live = 0;
  uint64_t src = 0;
  uint32_t count = 0;
  uint32_t bytes = 0;
};
static_assert(sizeof(ChangedPair) == 32 && sizeof(ChangedTile) == 24, "copied as bytes");

// The tiles of a pair of `bytes`.
inline int64_t ChangedTiles(int64_t bytes) {
  return (bytes + kChangedTileBytes - 1) / kChangedTileBytes;
}

// Writes tiles[t] for each of the `num_tiles` tiles of the pairs (in
// first_tile order), taking each listing tile's entries from *used
// (zeroed by the caller) in `list` of `capacity` entries.
void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                       ChangedTile* tiles, uint32_t* list, uint64_t capacity,
                       unsigned long long* used, cudaStream_t stream);
// The pause: every listed word into its live address, every whole tile
// copied from its staging.
void LaunchWriteChanged(const ChangedTile* tiles, int64_t num_tiles, const uint32_t* list,
                        cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
