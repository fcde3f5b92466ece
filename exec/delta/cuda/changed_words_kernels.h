// Kernel launchers for the apply of a staged round on a GPU
// (client/staged_buffers.h): the 32-byte sectors in which a staging copy
// differs from the live buffer it stages are marked before the engine
// pauses (one read of both), and the pause writes only those sectors, each
// whole (a partial write would cost the memory a read of the sector too).
// The same write without a mask copies every sector of many buffers in one
// launch. Every launcher only enqueues work on `stream`;
// client/cuda_staging_memory.cc checks the arguments.
//
// Work is cut into tiles of kChangedTileBytes of a pair; a tile's
// kChangedMaskWords mask words hold one bit per sector, from the pair's
// start.
#ifndef REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
#define REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace refit {

inline constexpr int64_t kChangedTileBytes = 16 * 1024;
inline constexpr int64_t kChangedSectorBytes = 32;
inline constexpr int64_t kChangedMaskWords = kChangedTileBytes / kChangedSectorBytes / 32;

// One buffer: `dst` (the live bytes) is written from `src` (staging);
// both 16-byte aligned. Its tiles are [first_tile, the next pair's).
struct ChangedPair {
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t bytes = 0;
  int64_t first_tile = 0;
};
static_assert(sizeof(ChangedPair) == 32, "copied as bytes");

// The tiles of a pair of `bytes`.
inline int64_t ChangedTiles(int64_t bytes) {
  return (bytes + kChangedTileBytes - 1) / kChangedTileBytes;
}

// Writes mask[t * kChangedMaskWords + w] for each of the `num_tiles` tiles
// of the pairs (in first_tile order): bit b of word w is set when sector
// 32 w + b of the tile differs between src and dst.
void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                       uint32_t* mask, cudaStream_t stream);
// Copies each sector whose mask bit is set (`mask` null: every sector)
// from src to dst, whole.
void LaunchWriteChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles,
                        const uint32_t* mask, cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
