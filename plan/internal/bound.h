// Lower bounds on the predicted refit time (plan/cost.h) that no choice of
// sources can beat: with trainer ranks as the only sources, and with
// relays (engine ranks forwarding bytes they hold).
#ifndef REFIT_PLAN_INTERNAL_BOUND_H_
#define REFIT_PLAN_INTERNAL_BOUND_H_

#include <cstdint>
#include <vector>

#include "layout/layout.h"
#include "plan/cost.h"
#include "plan/internal/candidates.h"

namespace refit {
namespace internal_plan {

// Returns the bound with trainer ranks as the only sources: per dst rank
// its bytes, per src rank the bytes only it holds, per replica group
// (distinct rank sets of the pieces) the bytes asked of it plus its ranks'
// own over its ranks, and all bytes over all src ranks; each byte over the
// fastest link any of its replicas offers. Never fails.
double SenderLowerBound(const Candidates& candidates, const SideLayout& src,
                        const SideLayout& dst, const CostModel& cost);

// Returns the bound with relays: per dst rank its bytes, each over the
// fastest link a replica or another engine rank of its unit or of a
// container (candidates.h) offers; per engine host the time its engine
// ranks spend receiving together, over their number (on a host, one
// engine rank of each uncontained unit takes its bytes from a trainer
// rank or across hosts, no faster than the best trainer replica offers
// it; the others at their best); per engine host and uncontained unit,
// the least time of a member there that takes the unit into the host
// (its bytes at their best, this unit's over the trainer replica's link:
// a unit is received whole by one rank); per engine host and set of its
// engine ranks holding all of some unit there (its members and those of
// the units it contains), the mean time of those ranks when they alone
// take into the host the units only they hold (an engine rank forwards
// only bytes it holds); where engine ranks share the
// trainer's hosts, the time those hosts' trainer and engine ranks take to
// send out the distinct bytes the other hosts need (the trainer ranks
// also feeding the engine ranks there); and the trainer side's terms of
// SenderLowerBound counting each uncontained unit (each distinct byte)
// once, over the fastest link from a replica to any engine rank of the
// unit (a contained unit's bytes may all come from engine ranks holding
// a container). Never fails.
// `member_rank`: per member (units.members order), its dst rank;
// `on_trainer_host`: OnTrainerHosts(src, dst, cost) (trainer_hosts.h). Sets
// *sender_bound to SenderLowerBound's figure, computed from the same links
// in the same pass.
double RelayLowerBound(const Candidates& candidates, const Units& units,
                       const Containers& containers, const std::vector<int32_t>& member_rank,
                       const SideLayout& src, const SideLayout& dst, const CostModel& cost,
                       const std::vector<char>& on_trainer_host, double* sender_bound);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BOUND_H_
