// Source choice with relays: which trainer replica, or which engine rank
// already holding the bytes, feeds each candidate.
#ifndef REFIT_PLAN_INTERNAL_RELAYS_H_
#define REFIT_PLAN_INTERNAL_RELAYS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "layout/layout.h"
#include "plan/internal/candidates.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Hops a byte may take between engine ranks after leaving the trainer
// side (each hop costs a wave of latency, not bandwidth): e.g. inside the
// first host, across to another host, inside that host.
inline constexpr int32_t kMaxRelayDepth = 3;
// The same for chains: a chain's member this deep feeds the next one only
// through the trainer side (a new chain), so that a unit replicated on
// hundreds of engine ranks costs a few trainer sends, not hundreds of
// pipeline steps.
inline constexpr int32_t kMaxChainDepth = 16;

// Chains are kept when their slowest rank's time is within this factor of
// the relay-aware bound (or of the same-GPU copies' time).
inline constexpr double kChainSlack = 1.05;

// Per candidate, where its bytes come from.
struct Sources {
  // Index into its piece's replicas when a trainer rank sends it; -1 when
  // relayed.
  std::vector<int32_t> choice;
  // The candidate, on another engine rank, whose record forwards the
  // bytes: of the same unit, or of a container (candidates.h: its region
  // holds this one's); -1 when a trainer rank sends them. Empty: no relays
  // at all.
  std::vector<int32_t> feeder;
  // Hops after the trainer: 0 from a trainer rank, the feeder's + 1.
  std::vector<int16_t> depth;
  int32_t max_depth = 0;
};

// Units are GroupUnits' (candidates.h): replicas of one part, or regions
// replicas of different layouts share. A unit whose region lies in
// another unit's region of the same piece (ContainingUnits: under a TP2
// trainer a TP4 rank's quarter of a weight lies in a TP2 rank's half) is
// contained: it is placed after every uncontained unit (tier by tier,
// each tier's steps 2 and 3 below), and an engine rank that holds a
// container's region may forward it the sub-region, like a holder of its
// own unit; a contained unit takes no root of its own in trees.
// Chooses every candidate's source by a deterministic greedy rule on the
// full-duplex time model (plan/cost.h; an engine rank's time is the larger
// of its received and forwarded bytes' times), under a floor (the
// relay-aware bound, or the slowest rank so far): options whose larger
// time is under the floor count as equal, then the faster link, the
// shorter depth (trainer first) and the less loaded ranks win.
// Chains: each unit's members in chain order (by host in order of host
// index, unknown placement: by rank; on a host by rank, turned by the
// unit's index so that units enter a host through each of its ranks in
// turn; where trainer and engine ranks share hosts, members fed by a
// replica on their own GPU first (step 1 below), then the hosts the
// trainer shares, then the others). Every
// chain's first member is fed by a trainer replica first (units by bytes
// descending, then first dst record); then each other member, in chain
// order, by a trainer replica or by the member before it, which holds the
// bytes by then (when that is under kMaxChainDepth deep). A contained
// unit's first member may instead be fed by a holder of a container (the
// faster link first: inside its host before the network). A relay
// forwards to one next rank: inside its host first, then one rank of the
// next host, so every link carries each byte once and a pipelined
// schedule keeps every link busy (relay_messages.h).
// Trees, when the chains' slowest rank is over kChainSlack times the
// bound (the chains stay where the trees come out slower):
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
//     from a replica or from a candidate of its unit or of a container
//     already fed (on another engine rank, depth below kMaxRelayDepth),
//     by the same rule,
//     ties to the faster link, then the shorter depth (trainer first),
//     then the less loaded sender.
// With `anticipate`, each member's bytes count on its rank's time from the
// start, over the best link it can have (a replica's, another member's of
// its unit or a container's), until its source is chosen: a rank that
// will receive much over fast links then takes less across hosts, where
// the rule above sees only what each rank has received so far. The trees
// are then always tried, and where no host is shared by the two sides,
// their roots move between the members of their units to even out the
// ranks' times (RebalanceRoots, relay_rebalance.h).
// Fills the cost fields of *stats (predicted time, both bounds, bytes per
// link class, relay depth). Never fails.
Sources ChooseRelaySources(const Candidates& candidates, const SideLayout& src,
                           const SideLayout& dst, const PlannerOptions& options,
                           PlanStats* stats, bool anticipate = false);

// Returns OK when every candidate has a source: a trainer replica, or a
// feeder (an empty `feeder`: no relays). Otherwise INTERNAL naming the
// first unsourced candidate's engine rank and tensor, and how many there
// are (a planner bug: those bytes would never be written).
absl::Status CheckEverySourced(const Candidates& candidates, const Sources& sources,
                               const SideLayout& dst);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAYS_H_
