// RoutePairs (see pair_routes.h).
#include "exec/transport/pair_routes.h"

#include <algorithm>

namespace refit {

bool PullsBetween(const std::vector<int32_t>& host_of_member, int32_t a, int32_t b) {
  const int32_t n = static_cast<int32_t>(host_of_member.size());
  return a >= 0 && b >= 0 && a < n && b < n && host_of_member[a] == host_of_member[b];
}

PairRoutes RoutePairs(const std::vector<std::pair<int32_t, int32_t>>& pairs,
                      const std::vector<int32_t>& host_of_member) {
  PairRoutes r;
  for (const auto& [a, b] : pairs) {
    if (PullsBetween(host_of_member, a, b)) {
      ++r.pull_pairs;
      continue;
    }
    ++r.network_pairs;
    r.network_members.push_back(a);
    r.network_members.push_back(b);
  }
  std::sort(r.network_members.begin(), r.network_members.end());
  r.network_members.erase(std::unique(r.network_members.begin(), r.network_members.end()),
                          r.network_members.end());
  return r;
}

}  // namespace refit
