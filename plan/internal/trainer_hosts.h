// Which engine ranks share a host with a trainer rank: there a pair's link
// class depends on both ranks, one GPU may hold both, and bytes may enter
// the engine side without crossing the network.
#ifndef REFIT_PLAN_INTERNAL_TRAINER_HOSTS_H_
#define REFIT_PLAN_INTERNAL_TRAINER_HOSTS_H_

#include <vector>

#include "layout/layout.h"
#include "plan/cost.h"

namespace refit {
namespace internal_plan {

// Returns per engine rank (dst.world_size entries) whether its host
// (dst.host_of_rank) holds a trainer rank (src.host_of_rank); empty when
// `cost` does not know the placement (CostModel::placement_known, which
// also means both sides give one host per rank). `cost` is built on `src`
// and `dst`. Never fails.
std::vector<char> OnTrainerHosts(const SideLayout& src, const SideLayout& dst,
                                 const CostModel& cost);

// Returns whether some engine rank shares a host with a trainer rank
// (`on_trainer_hosts` from OnTrainerHosts).
bool SharesHosts(const std::vector<char>& on_trainer_hosts);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_TRAINER_HOSTS_H_
