// CostModel (see cost.h).
#include "plan/cost.h"

#include <algorithm>

namespace refit {

CostModel::CostModel(const SideLayout& src, const SideLayout& dst,
                     const PlannerOptions& options)
    : src_host_(src.host_of_rank.data()),
      dst_host_(dst.host_of_rank.data()),
      src_gpu_(src.gpu_of_rank.data()),
      dst_gpu_(dst.gpu_of_rank.data()),
      src_n_(0),
      dst_n_(0),
      known_(options.prefer_same_host &&
             static_cast<int32_t>(src.host_of_rank.size()) == src.world_size &&
             static_cast<int32_t>(dst.host_of_rank.size()) == dst.world_size &&
             src.world_size > 0 && dst.world_size > 0),
      gpus_known_(known_ &&
                  static_cast<int32_t>(src.gpu_of_rank.size()) == src.world_size &&
                  static_cast<int32_t>(dst.gpu_of_rank.size()) == dst.world_size),
      spb_{1.0 / (options.links.same_gpu_gbps * 1e9),
           1.0 / (options.links.intra_host_gbps * 1e9),
           1.0 / (options.links.inter_host_gbps * 1e9)} {
  if (known_) {
    src_n_ = static_cast<uint32_t>(src.world_size);
    dst_n_ = static_cast<uint32_t>(dst.world_size);
  }
}

RankLoads::RankLoads(int32_t src_world, int32_t dst_world)
    : src_(std::max(0, src_world)), dst_(std::max(0, dst_world)), forwarded_(dst_.size()) {}

void RankLoads::Add(const CostModel& cost, const Message& m, int64_t bytes) {
  const LinkClass k = m.relay ? cost.EngineClassOf(m.src_rank, m.dst_rank)
                              : cost.ClassOf(m.src_rank, m.dst_rank);
  (m.relay ? forwarded_ : src_)[m.src_rank].Add(k, bytes);
  dst_[m.dst_rank].Add(k, bytes);
}

RankLoads::Slowest RankLoads::SlowestRank(const CostModel& cost) const {
  Slowest s;
  for (size_t r = 0; r < src_.size(); ++r) {
    const double t = cost.Seconds(src_[r]);
    if (t > s.seconds) s = {t, true, static_cast<int32_t>(r)};
  }
  for (size_t r = 0; r < dst_.size(); ++r) {
    const double t = std::max(cost.Seconds(dst_[r]), cost.Seconds(forwarded_[r]));
    if (t > s.seconds) s = {t, false, static_cast<int32_t>(r)};
  }
  return s;
}

double PredictedSeconds(const Plan& plan, const LinkSpeeds& links, LinkBytes* by_class) {
  PlannerOptions options = plan.options;
  options.links = links;
  const CostModel cost(plan.src, plan.dst, options);
  // A relay's sender is an engine rank: its egress is counted apart from
  // its ingress (full duplex), as the planner counts it.
  RankLoads loads(plan.src.world_size, plan.dst.world_size);
  LinkBytes all;
  for (const Message& m : plan.messages) {
    loads.Add(cost, m, m.bytes);
    all.Add(m.relay ? cost.EngineClassOf(m.src_rank, m.dst_rank)
                    : cost.ClassOf(m.src_rank, m.dst_rank),
            m.bytes);
  }
  if (by_class != nullptr) *by_class = all;
  return loads.SlowestRank(cost).seconds;
}

LinkSpeeds GlooLinkSpeeds() {
  LinkSpeeds s;
  s.same_gpu_gbps = 1.0;   // no GPU: two processes of one host, loopback TCP
  s.intra_host_gbps = 1.0;
  s.inter_host_gbps = 1.25;
  return s;
}

}  // namespace refit
