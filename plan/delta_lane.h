// A rank's per-lane share of the staging budget, and a delta round's lane
// room (exec/delta/delta_room.h), as both the planner and the delta runner
// size them: the bytes one lane of a rank holds for one
// delta batch, and the part of it a plan with conversions keeps for a
// trainer rank to quantize its batch's rows in (exec/delta/delta_runner.h:
// Quantized engines). The planner caps its waves and messages so that a
// wave's packed bytes leave that part free (planner.h); the runner sizes
// its quantizing steps to what a batch leaves of the room.
#ifndef REFIT_PLAN_DELTA_LANE_H_
#define REFIT_PLAN_DELTA_LANE_H_

#include <cstdint>

#include "plan/plan.h"

namespace refit {

// Returns the staging bytes one rank may use per lane: staging_budget_bytes
// / num_lanes, at least 1. Never fails.
int64_t LaneShare(const PlannerOptions& options);

// Returns the bytes one lane of a rank holds for one delta batch (staging
// and encodings): LaneShare, half of it when options.relay (a relay keeps
// payloads in the rest); at least 1. Never fails.
int64_t DeltaLaneRoom(const PlannerOptions& options);

// The most bytes of a lane room kept for quantizing: one step of whole
// tile rows, its codes, scales and (where its source rows are strided)
// their gather; 128 rows of an FP8 weight 18432 wide take 6.75 MiB with
// their gather.
inline constexpr int64_t kMaxQuantizeRoomBytes = int64_t{8} << 20;

// Returns the bytes of a delta lane room that a plan with conversions
// keeps free of a wave's messages, and the most one quantizing step of a
// delta batch takes (its steps of whole tile rows fit it where one tile
// row does): min(kMaxQuantizeRoomBytes, DeltaLaneRoom(options) / 4), at
// least 1. Never fails.
int64_t QuantizeRoom(const PlannerOptions& options);

}  // namespace refit

#endif  // REFIT_PLAN_DELTA_LANE_H_
