// Replica choice: which source record sends each candidate.
#ifndef REFIT_PLAN_INTERNAL_BALANCE_H_
#define REFIT_PLAN_INTERNAL_BALANCE_H_

#include <cstdint>
#include <vector>

#include "layout/layout.h"
#include "plan/internal/candidates.h"

namespace refit {
namespace internal_plan {

// Returns, per candidate, the index of its chosen replica (into its
// piece's replicas), by the deterministic greedy rule of planner.h:
// candidates with one replica first; the others by bytes descending, then
// dst record, then piece, each to the replica whose src rank has the fewest
// bytes so far; ties to a replica on the dst rank's host (when
// prefer_same_host and both sides give host_of_rank), then to the earlier
// replica. Never fails.
std::vector<int32_t> BalanceReplicas(const Candidates& candidates,
                                     const SideLayout& src,
                                     const SideLayout& dst,
                                     bool prefer_same_host);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BALANCE_H_
