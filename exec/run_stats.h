// RunStats: what one run of a member's data plane moved and held
// (RoundRunner::Run returns it), with the round's digest parts.
#ifndef REFIT_EXEC_RUN_STATS_H_
#define REFIT_EXEC_RUN_STATS_H_

#include <cstdint>
#include <map>
#include <utility>

namespace refit {

// A verified round's digest parts: (engine rank, engine tensor index) ->
// digest sum (mod 2^64); exec/delta/round_digest.h computes and compares
// them.
using DigestSums = std::map<std::pair<int32_t, int32_t>, uint64_t>;

struct RunStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t waves = 0;  // of the plan (plan.h), run by this member
  double seconds = 0;
  // The most memory the data plane held during the run (staging of all
  // lanes, conversion scratch, the amax exchange) plus the conversion
  // steps' workspace (ConvertOps::workspace_bytes). A delta round holds no
  // conversion scratch (its batches quantize in their lane rooms) and
  // reports that workspace apart (DeltaRoundStats::convert_workspace_bytes).
  int64_t peak_staging_bytes = 0;
  double device_seconds = 0;  // GPU time of the round's copy kernels (pull path)
  // A staged engine member: seconds its live buffers took to write from
  // staging (the engine's pause; client/data_plane.h ApplyRound).
  double pause_seconds = 0;
  // Messages this member sent or received as their changed words (a delta
  // round) and whole. Runners that move dense bytes only leave both 0.
  int64_t delta_messages = 0;
  int64_t dense_messages = 0;
  // A round begun with RoundStart::digest: this member's digest parts and
  // the seconds spent on them (empty and 0 otherwise, and on runners that
  // do not digest: the dense executor, the pull path).
  DigestSums digests;
  double digest_seconds = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_RUN_STATS_H_
