// staged_bench's replay experiment (bench/staged_replay.h): the changed
// BF16 words of a staged delta round packed as the delta codec's indices
// payloads carry them (positions, then values), their scatter into the
// live buffers, and a change of whole rows. Plain C++ API (no CUDA
// headers); each launcher returns the launch's cudaError_t as an int.
#ifndef REFIT_BENCH_STAGED_REPLAY_KERNELS_H_
#define REFIT_BENCH_STAGED_REPLAY_KERNELS_H_

#include <cstdint>

namespace refit {
namespace bench {

// Words of a chunk of the count and pack kernels.
inline constexpr int64_t kReplayChunkWords = 64 * 1024;

// One message of a replay: elements [first, the next message's first) of
// the packed arrays land at dst + 2 * position.
struct ReplayMessage {
  char* dst = nullptr;
  int64_t first = 0;
};
static_assert(sizeof(ReplayMessage) == 16, "copied as bytes");

// counts[c] = the 2-byte words of chunk c (kReplayChunkWords each) of the
// first `words` words at a and b in which they differ.
int LaunchCountChangedWords(const uint16_t* a, const uint16_t* b, int64_t words, int32_t* counts,
                            void* stream);

// For each differing word i of chunk c, in increasing order from
// offsets[c]: pos[k] = i, global[k] = the low 32 bits of global_base + i,
// val[k] = a[i].
int LaunchPackChangedWords(const uint16_t* a, const uint16_t* b, int64_t words,
                           const int64_t* offsets, uint64_t global_base, uint32_t* pos,
                           uint32_t* global, uint16_t* val, void* stream);

// The scatter of `total` packed elements (pos, val) by the `num_messages`
// messages (in element order), on every SM (`blocks` thread blocks of 256).
int LaunchReplayScatter(const ReplayMessage* messages, int32_t num_messages, const uint32_t* pos,
                        const uint16_t* val, int64_t total, int blocks, void* stream);

// Flips the lowest bit of every word of about `fraction` of the rows of
// `row_words` words of w (n words), rows chosen by a hash of seed and row.
int LaunchRowChange(uint16_t* w, int64_t n, int64_t row_words, double fraction, uint64_t seed,
                    void* stream);

// Thread blocks of 256 resident on the current GPU at once.
int ReplayBlocks();

}  // namespace bench
}  // namespace refit

#endif  // REFIT_BENCH_STAGED_REPLAY_KERNELS_H_
