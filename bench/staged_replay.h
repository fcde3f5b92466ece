// staged_bench's A/B of the pause of a staged delta round on one GPU: the
// product's apply (StagedBuffers::FindChanged before the pause, then
// ApplyChanged: every changed 32-byte sector written whole) against a
// replay of the received payloads (the changed BF16 words' positions and
// values, one message per engine buffer as the delta codec's indices
// encoding carries them, scattered by one kernel on every SM), and the
// floor of any scatter: the same elements from one prepacked array (one
// message per 2^32 words of the engine's arena). Each for a change of
// uniformly random words and of whole rows (optimizer updates of whole
// rows).
//
// The payloads are packed from staging against live after the receive
// (over the one-GPU pull path a round carries every byte): what the codec
// would have delivered, in the same order.
#ifndef REFIT_BENCH_STAGED_REPLAY_H_
#define REFIT_BENCH_STAGED_REPLAY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/staged_buffers.h"

namespace refit {
namespace bench {

// One change pattern's figures, per round (ms).
struct ReplayFigures {
  std::string pattern;
  std::vector<double> product, replay, floor;
  double changed_share = 0;  // of the engine's BF16 words
  double sector_share = 0;   // of the engine's bytes, in changed 32-byte sectors
  int64_t elements = 0;      // changed words of the last round
};

// What the bench gives the experiment.
struct ReplayHooks {
  // Changes the trainer's weights (`rows`: whole rows, else random words);
  // a second call changes them back.
  std::function<absl::Status(bool rows)> change;
  // One round's receive into staging.
  std::function<absl::Status()> receive;
  // Bytes (unit 1) or blocks of `unit` bytes in which staging and live differ.
  std::function<absl::StatusOr<unsigned long long>(int unit)> diff;
  char* arena = nullptr;  // the live buffers' arena (all live buffers lie in it)
};

// Runs 2 `iters` + 2 rounds of each pattern (the first two: warm-up) over
// `st` (every buffer in device staging); each round lists (product), packs
// the payloads, then times the replay, the floor and the product's apply,
// and checks after each that every live byte equals staging. A failed
// check goes to *check (and is printed). Returns the figures per pattern;
// the device's error, or FAILED_PRECONDITION when a buffer is not BF16
// sized or the device staging listed nothing.
absl::StatusOr<std::vector<ReplayFigures>> RunReplayRounds(StagedBuffers* st,
                                                           const ReplayHooks& hooks, int iters,
                                                           std::string* check);

}  // namespace bench
}  // namespace refit

#endif  // REFIT_BENCH_STAGED_REPLAY_H_
