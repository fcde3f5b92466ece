// Replica choice: which source record sends each candidate.
#ifndef REFIT_PLAN_INTERNAL_BALANCE_H_
#define REFIT_PLAN_INTERNAL_BALANCE_H_

#include <cstdint>
#include <vector>

#include "layout/layout.h"
#include "plan/cost.h"
#include "plan/internal/candidates.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Returns, per candidate, the index of its chosen replica (into its
// piece's replicas), by the deterministic greedy rule of planner.h:
// candidates with one replica first; the others by bytes descending, then
// dst record, then piece, each (among the replicas on the dst rank's GPU
// when it has any) to the replica that makes the larger of
// its src rank's and its dst rank's predicted time (plan/cost.h) smallest,
// times below the lower bound (or the slowest rank so far, when above it)
// counting as equal; among equal ones to a replica over the faster link
// class (same GPU, then same host, then across hosts, at equal speeds),
// then to the src rank with the least predicted time, then to the earlier
// replica. Fills the cost fields of *stats (predicted time, lower bound,
// bytes per link class). Never fails.
std::vector<int32_t> BalanceReplicas(const Candidates& candidates,
                                     const SideLayout& src,
                                     const SideLayout& dst,
                                     const PlannerOptions& options,
                                     PlanStats* stats);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BALANCE_H_
