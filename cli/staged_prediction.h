// The pause of staged engines, predicted for `refit plan --engine_staging`:
// each engine rank stages its buffers in device memory up to its budget, in
// buffer order, a buffer that would pass the budget going to pinned host
// memory instead (the rule of client/staged_buffers.h). The pause writes the
// live buffers from staging: the device part as a device-local copy
// (LinkModel::same_gpu_gbps), the host overflow over the host link
// (LinkModel::host_gbps).
#ifndef REFIT_CLI_STAGED_PREDICTION_H_
#define REFIT_CLI_STAGED_PREDICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/plan_summary.h"
#include "plan/plan.h"

namespace refit {

// An engine rank's staging budget, as the member options give it: a byte
// figure (StagingOptions::budget_bytes, the C/Python `staging_bytes`) or a
// share of the rank's weight bytes (StagingOptions::budget_share).
struct EngineStaging {
  int64_t bytes = -1;  // >= 0: the budget in bytes
  double share = 1.0;  // used when bytes < 0: the budget as a share, (0, 1]
};

// Parses --engine_staging: "BYTES" (an integer, optionally with a KiB,
// MiB or GiB suffix) or "SHARE" (a decimal in (0, 1] with a '.', or a
// percentage such as "50%"). Returns INVALID_ARGUMENT naming
// --engine_staging for anything else.
absl::StatusOr<EngineStaging> ParseEngineStaging(const std::string& text);

struct StagedRank {
  int32_t rank = 0;
  int64_t weight_bytes = 0;    // the rank's buffers
  int64_t device_bytes = 0;    // staged in device memory
  int64_t overflow_bytes = 0;  // staged in pinned host memory
  double pause_seconds = 0;    // device copy plus overflow over the host link
};

struct StagedPrediction {
  std::vector<StagedRank> ranks;  // every engine rank, by rank
  int32_t slowest_rank = -1;      // the rank with the longest pause; -1 if none
};

// Returns each engine rank's staging split and pause for the plan's engine
// buffers. Fails with INVALID_ARGUMENT naming --link when a speed is not
// positive, or naming the buffer when it belongs to no engine rank.
absl::StatusOr<StagedPrediction> PredictStaged(const Plan& plan, const LinkModel& link,
                                               const EngineStaging& staging);

// "staged engine ..." lines for refit plan: the budget and speeds, then one
// line per engine rank (device bytes, host overflow bytes, pause), then the
// longest pause next to the plan's predicted round time.
std::string FormatStagedText(const StagedPrediction& p, const LinkModel& link,
                             const EngineStaging& staging, double round_seconds);

// The prediction as a JSON object: "budget_bytes" (-1 when a share) or
// "budget_share", "device_copy_gbps", "host_gbps", "ranks" (each with
// "rank", "weight_bytes", "device_bytes", "overflow_bytes",
// "pause_seconds") and "longest_pause_seconds".
std::string FormatStagedJson(const StagedPrediction& p, const LinkModel& link,
                             const EngineStaging& staging);

}  // namespace refit

#endif  // REFIT_CLI_STAGED_PREDICTION_H_
