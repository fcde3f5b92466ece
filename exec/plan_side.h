// A rank's place in a plan: which side it is on, and its rank in a
// transport joining both sides (trainer rank t is t, engine rank e is
// src_world + e).
#ifndef REFIT_EXEC_PLAN_SIDE_H_
#define REFIT_EXEC_PLAN_SIDE_H_

#include <cstdint>

#include "plan/plan.h"

namespace refit {

// Which side of the plan a rank is on.
enum class PlanSide { kSource, kDestination };

// Global transport rank of a side-local rank: t or src_world + e.
inline int32_t GlobalRank(const Plan& plan, PlanSide side, int32_t rank) {
  return side == PlanSide::kSource ? rank : plan.src.world_size + rank;
}

}  // namespace refit

#endif  // REFIT_EXEC_PLAN_SIDE_H_
