#include "plan/delta_lane.h"

#include <algorithm>

namespace refit {

int64_t LaneShare(const PlannerOptions& options) {
  return std::max<int64_t>(1,
                           options.staging_budget_bytes / std::max<int32_t>(1, options.num_lanes));
}

int64_t DeltaLaneRoom(const PlannerOptions& options) {
  const int64_t share = LaneShare(options);
  return options.relay ? std::max<int64_t>(1, share / 2) : share;
}

int64_t QuantizeRoom(const PlannerOptions& options) {
  return std::max<int64_t>(1, std::min(kMaxQuantizeRoomBytes, DeltaLaneRoom(options) / 4));
}

}  // namespace refit
