// Plan statistics: bytes and peak staging per rank, as the executor
// allocates staging.
#ifndef REFIT_PLAN_PLAN_STATS_H_
#define REFIT_PLAN_PLAN_STATS_H_

#include "plan/plan.h"

namespace refit {

// Returns the statistics of a plan from its messages and waves
// (phase_seconds empty): bytes per rank (relay messages count as bytes
// their engine rank forwards, and in its staging), and peak staging per rank as the
// executor allocates it (per lane, the largest wave's staged bytes; the
// executor aligns messages in staging only where that fits this). Never
// fails; the plan's ranks must be within its world sizes.
PlanStats ComputePlanStats(const Plan& plan);

}  // namespace refit

#endif  // REFIT_PLAN_PLAN_STATS_H_
