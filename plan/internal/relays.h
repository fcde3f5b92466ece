// Source choice with relays: which trainer replica, or which engine rank
// already holding the bytes, feeds each candidate.
#ifndef REFIT_PLAN_INTERNAL_RELAYS_H_
#define REFIT_PLAN_INTERNAL_RELAYS_H_

#include <cstdint>
#include <vector>

#include "layout/layout.h"
#include "plan/internal/candidates.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Hops a byte may take between engine ranks after leaving the trainer
// side (each hop costs a wave of latency, not bandwidth): e.g. inside the
// first host, across to another host, inside that host.
inline constexpr int32_t kMaxRelayDepth = 3;

// Per candidate, where its bytes come from.
struct Sources {
  // Index into its piece's replicas when a trainer rank sends it; -1 when
  // relayed.
  std::vector<int32_t> choice;
  // The candidate of the same unit, on another engine rank, whose record
  // forwards the bytes; -1 when a trainer rank sends them. Empty: no
  // relays at all.
  std::vector<int32_t> feeder;
  // Hops after the trainer: 0 from a trainer rank, the feeder's + 1.
  std::vector<int16_t> depth;
  int32_t max_depth = 0;
};

// Units are GroupUnits' (candidates.h): replicas of one part, or regions
// replicas of different layouts share.
// Chooses every candidate's source by a deterministic greedy rule on the
// full-duplex time model (plan/cost.h; an engine rank's time is the larger
// of its received and forwarded bytes' times):
//  1. A candidate with a replica on its dst rank's GPU takes it (the
//     least loaded one of those), as in BalanceReplicas.
//  2. Roots: every unit none of whose candidates was fed by step 1 gets
//     one candidate fed by a trainer rank: units by bytes descending (then
//     first dst record), each to the (candidate, replica) pair that makes
//     the larger of the two ranks' times smallest, times under the floor
//     (the relay-aware bound, or the slowest rank so far) equal; ties to
//     the faster link, then the less loaded src rank, then the less loaded
//     dst rank (spreading roots over replicas), then the earlier pair.
//  3. The rest, units in the same order, host by host (in order of their
//     first candidate; on a host the candidate whose rank received least
//     first): each
//     from a replica or from a candidate of its unit already fed (on
//     another engine rank, depth below kMaxRelayDepth), by the same rule,
//     ties to the faster link, then the shorter depth (trainer first),
//     then the less loaded sender.
// Fills the cost fields of *stats (predicted time, both bounds, bytes per
// link class, relay depth). Never fails.
Sources ChooseRelaySources(const Candidates& candidates, const SideLayout& src,
                           const SideLayout& dst, const PlannerOptions& options,
                           PlanStats* stats);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAYS_H_
