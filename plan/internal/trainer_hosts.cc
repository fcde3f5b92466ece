// OnTrainerHosts (see trainer_hosts.h).
#include "plan/internal/trainer_hosts.h"

#include <algorithm>
#include <cstdint>

namespace refit {
namespace internal_plan {

std::vector<char> OnTrainerHosts(const SideLayout& src, const SideLayout& dst,
                                 const CostModel& cost) {
  std::vector<char> on;
  if (!cost.placement_known()) return on;
  std::vector<int32_t> hosts(src.host_of_rank.begin(), src.host_of_rank.end());
  std::sort(hosts.begin(), hosts.end());
  on.resize(dst.world_size);
  for (int32_t d = 0; d < dst.world_size; ++d) {
    on[d] = std::binary_search(hosts.begin(), hosts.end(), dst.host_of_rank[d]);
  }
  return on;
}

bool SharesHosts(const std::vector<char>& on_trainer_hosts) {
  return std::find(on_trainer_hosts.begin(), on_trainer_hosts.end(), 1) !=
         on_trainer_hosts.end();
}

}  // namespace internal_plan
}  // namespace refit
