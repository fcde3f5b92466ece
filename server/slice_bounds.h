// SliceBoundsOf: what each member's slice of a plan moves (SliceBounds,
// plan_function.h), which bounds the figures and digest parts its round
// reports may carry.
#ifndef REFIT_SERVER_SLICE_BOUNDS_H_
#define REFIT_SERVER_SLICE_BOUNDS_H_

#include <cstdint>
#include <vector>

#include "layout/side.h"
#include "plan/plan.h"
#include "server/plan_function.h"

namespace refit {

// Returns, for each rank of `ranks` (of `side`: trainer ranks send, engine
// ranks receive and, with relays, forward), the bytes and messages of its
// slice of `plan` (an engine rank's bytes: the larger of those it receives
// and those it forwards) and the (engine rank, engine tensor) places the
// messages it receives write. A rank outside
// the side's world gets empty bounds. One pass over the plan's messages.
std::vector<SliceBounds> SliceBoundsOf(const Plan& plan, Side side,
                                       const std::vector<int32_t>& ranks);

}  // namespace refit

#endif  // REFIT_SERVER_SLICE_BOUNDS_H_
