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

// Pipelined staging: when max_message_bytes is 0, the heaviest rank
// stages (`coalesced_bytes`: the most bytes of one rank's segments below
// direct_min_bytes, sent or received) at least kPipelinedStagingMinWaves
// per-lane budgets, and the heaviest rank's bytes (`all_bytes`) make fewer
// than kPipelinedStagingWaves waves, waves stage at most coalesced_bytes /
// kPipelinedStagingWaves (at least a quarter of the per-lane budget), so
// that the first pack and last unpack, which no other lane's transfer
// hides, are a small part of the round. Plans with more waves already
// have that; plans staging less are left alone (their per-wave costs
// would grow).
inline constexpr int64_t kPipelinedStagingMinWaves = 4;
inline constexpr int64_t kPipelinedStagingWaves = 32;

// Returns the staged bytes one rank packs plus unpacks in one wave at most
// (the cap of coalesced messages): MessageCap(options), or less for a plan
// of many staged bytes (above); never below 1 MiB.
inline int64_t StagedWaveCap(const PlannerOptions& options, int64_t coalesced_bytes,
                             int64_t all_bytes) {
  const int64_t cap = MessageCap(options);
  const int64_t lane_budget = LaneBudget(options);
  if (options.max_message_bytes != 0 ||
      coalesced_bytes < kPipelinedStagingMinWaves * lane_budget ||
      all_bytes / kPipelinedStagingWaves >= lane_budget) {
    return cap;
  }
  const int64_t per_wave = std::max({int64_t{1} << 20, lane_budget / 4,
                                     coalesced_bytes / kPipelinedStagingWaves});
  return std::min(cap, per_wave);
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
