// Kernel launchers for the apply of a staged round on a GPU
// (client/staged_buffers.h): the blocks of `unit` bytes in which a staging
// copy differs from the live buffer it stages are marked before the
// engine pauses (one read of both), and the pause writes only those
// blocks, each whole (a write of part of the memory's access unit makes
// it read the unit as well). Every launcher only enqueues work on
// `stream`; client/cuda_staging_memory.cc checks the arguments.
//
// Work is cut into tiles of kChangedTileBytes of a pair; a tile's mask
// words (ChangedMaskWords(unit) of them) hold one bit per block, from the
// pair's start.
#ifndef REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
#define REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace refit {

inline constexpr int64_t kChangedTileBytes = 16 * 1024;

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
// Whether the kernels take blocks of `unit` bytes: 32, 64 or 128.
inline bool ChangedUnitOk(int unit) { return unit == 32 || unit == 64 || unit == 128; }
// Mask words per tile for blocks of `unit` bytes.
inline int64_t ChangedMaskWords(int unit) { return kChangedTileBytes / unit / 32; }

// Writes the ChangedMaskWords(unit) words of each of the `num_tiles`
// tiles of the pairs (in first_tile order) at mask + t * words: bit b of
// word w is set when block 32 w + b of the tile differs between src and
// dst.
void LaunchFindChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                       uint32_t* mask, cudaStream_t stream);
// Copies each block whose mask bit is set from src to dst, whole.
void LaunchWriteChanged(const ChangedPair* pairs, int32_t num_pairs, int64_t num_tiles, int unit,
                        const uint32_t* mask, cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_CHANGED_WORDS_KERNELS_H_
