// Byte limits the planner derives from its options.
#ifndef REFIT_PLAN_INTERNAL_BUDGETS_H_
#define REFIT_PLAN_INTERNAL_BUDGETS_H_

#include <algorithm>
#include <cstdint>

#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Returns the staging bytes one rank may use per lane (at least 1).
// Options must be valid (ValidateOptions).
inline int64_t LaneBudget(const PlannerOptions& options) {
  return std::max<int64_t>(1, options.staging_budget_bytes / options.num_lanes);
}

// Returns the most bytes one message carries: min(max_message_bytes, the
// per-lane budget), or the per-lane budget when max_message_bytes is 0.
inline int64_t MessageCap(const PlannerOptions& options) {
  const int64_t lane_budget = LaneBudget(options);
  return options.max_message_bytes > 0
             ? std::min(options.max_message_bytes, lane_budget)
             : lane_budget;
}

// Pipelined staging: when max_message_bytes is 0 and the heaviest rank
// stages at least kPipelinedStagingWaves per-lane budgets (many small or
// strided pieces: `coalesced_bytes`, per rank, the bytes of segments below
// direct_min_bytes, sent plus received), its waves stage at most
// 1 / kPipelinedStagingSplit of the per-lane budget, so that a lane's pack
// and unpack are short next to the other lanes' transfers and the first
// pack and last unpack, which nothing hides, are small.
inline constexpr int64_t kPipelinedStagingWaves = 4;
inline constexpr int64_t kPipelinedStagingSplit = 4;

// Returns the staged bytes one rank packs plus unpacks in one wave at most
// (the cap of coalesced messages): the per-lane budget, or a fraction of
// it for a plan of many staged bytes (above) when options leave message
// sizes to the planner; never below 1 MiB or above MessageCap(options).
inline int64_t StagedWaveCap(const PlannerOptions& options, int64_t coalesced_bytes) {
  const int64_t cap = MessageCap(options);
  const int64_t lane_budget = LaneBudget(options);
  if (options.max_message_bytes != 0 ||
      coalesced_bytes < kPipelinedStagingWaves * lane_budget) {
    return cap;
  }
  return std::min(cap, std::max<int64_t>(int64_t{1} << 20, lane_budget / kPipelinedStagingSplit));
}

// Returns the most bytes one rank sends plus receives in one wave:
// max_wave_bytes, or the per-lane budget when that is 0.
inline int64_t WaveCap(const PlannerOptions& options) {
  return options.max_wave_bytes > 0 ? options.max_wave_bytes
                                     : LaneBudget(options);
}

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BUDGETS_H_
