// CostModel (see cost.h).
#include "plan/cost.h"

namespace refit {

CostModel::CostModel(const SideLayout& src, const SideLayout& dst,
                     const PlannerOptions& options)
    : src_host_(&src.host_of_rank),
      dst_host_(&dst.host_of_rank),
      src_gpu_(&src.gpu_of_rank),
      dst_gpu_(&dst.gpu_of_rank),
      known_(options.prefer_same_host &&
             static_cast<int32_t>(src.host_of_rank.size()) == src.world_size &&
             static_cast<int32_t>(dst.host_of_rank.size()) == dst.world_size &&
             src.world_size > 0 && dst.world_size > 0),
      gpus_known_(known_ &&
                  static_cast<int32_t>(src.gpu_of_rank.size()) == src.world_size &&
                  static_cast<int32_t>(dst.gpu_of_rank.size()) == dst.world_size),
      spb_{1.0 / (options.links.same_gpu_gbps * 1e9),
           1.0 / (options.links.intra_host_gbps * 1e9),
           1.0 / (options.links.inter_host_gbps * 1e9)} {}

}  // namespace refit
