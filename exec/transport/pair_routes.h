// Which data plane each (trainer, engine) pair of a plan uses when members
// are colocated: pairs whose two members are on one host pull (the
// colocated pull path), the others go over the network transport (NCCL).
// refitd decides (server/plan_assembly.h) and hands every member the hosts
// and the network's members in its bootstrap.
#ifndef REFIT_EXEC_TRANSPORT_PAIR_ROUTES_H_
#define REFIT_EXEC_TRANSPORT_PAIR_ROUTES_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace refit {

struct PairRoutes {
  // Global ranks, ascending, of the members with at least one pair on the
  // network transport: the network transport connects these only.
  std::vector<int32_t> network_members;
  int64_t pull_pairs = 0;
  int64_t network_pairs = 0;
};

// Routes `pairs` (global ranks (trainer, engine) that exchange messages)
// by `host_of_member` (a host index per global rank): a pair on one host
// pulls, the others use the network. Pairs naming a rank outside
// host_of_member use the network.
PairRoutes RoutePairs(const std::vector<std::pair<int32_t, int32_t>>& pairs,
                      const std::vector<int32_t>& host_of_member);

// True when global ranks `a` and `b` pull from each other by
// `host_of_member` (both inside it, same host).
bool PullsBetween(const std::vector<int32_t>& host_of_member, int32_t a, int32_t b);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_PAIR_ROUTES_H_
