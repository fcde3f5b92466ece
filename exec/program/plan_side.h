// A rank's place in a plan: its side (layout/side.h; the trainer side is
// the plan's src, the engine side its dst) and its rank in a transport
// joining both sides (trainer rank t is t, engine rank e is src_world + e).
#ifndef REFIT_EXEC_PROGRAM_PLAN_SIDE_H_
#define REFIT_EXEC_PROGRAM_PLAN_SIDE_H_

#include <cstdint>

#include "layout/side.h"
#include "plan/plan.h"

namespace refit {

// Global transport rank of a side-local rank: t or src_world + e.
inline int32_t GlobalRank(const Plan& plan, Side side, int32_t rank) {
  return side == Side::kTrainer ? rank : plan.src.world_size + rank;
}

}  // namespace refit

#endif  // REFIT_EXEC_PROGRAM_PLAN_SIDE_H_
