// RunStats: what one run of a member's data plane moved and held
// (RoundRunner::Run returns it).
#ifndef REFIT_EXEC_RUN_STATS_H_
#define REFIT_EXEC_RUN_STATS_H_

#include <cstdint>

namespace refit {

struct RunStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t waves = 0;  // of the plan (plan.h), run by this member
  double seconds = 0;
  // The most memory the data plane held during the run (staging of all
  // lanes, conversion scratch, the amax exchange) plus the conversion
  // steps' workspace (ConvertOps::workspace_bytes).
  int64_t peak_staging_bytes = 0;
  double device_seconds = 0;  // GPU time of the round's copy kernels (pull path)
  // A staged engine member: seconds its live buffers took to write from
  // staging (the engine's pause; client/data_plane.h ApplyRound).
  double pause_seconds = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_RUN_STATS_H_
