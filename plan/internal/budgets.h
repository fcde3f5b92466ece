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

// Returns the most bytes one rank sends plus receives in one wave:
// max_wave_bytes, or the per-lane budget when that is 0.
inline int64_t WaveCap(const PlannerOptions& options) {
  return options.max_wave_bytes > 0 ? options.max_wave_bytes
                                     : LaneBudget(options);
}

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BUDGETS_H_
