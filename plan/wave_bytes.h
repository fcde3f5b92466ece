// The whole plan's bytes per wave (Wave::plan_bytes, Wave::lane_offset):
// set on a whole plan, carried unchanged by its slices, so a rank that
// holds only its slice still knows where each of its waves lies in its
// lane's bytes (the delta runner cuts batches by them).
#ifndef REFIT_PLAN_WAVE_BYTES_H_
#define REFIT_PLAN_WAVE_BYTES_H_

#include "absl/status/status.h"
#include "plan/plan.h"

namespace refit {

// Sets every wave's plan_bytes (the bytes of its messages) and lane_offset
// (the plan_bytes of the waves before it on its lane) from `plan`'s
// messages. Call on a whole plan, never on a slice (which keeps the whole
// plan's figures). Never fails; the waves' message ranges must lie within
// the plan's messages.
void SetWaveBytes(Plan* plan);

// OK when `plan` (whole or a slice) carries consistent whole-plan figures:
// every wave's plan_bytes at least the bytes of the messages it holds,
// offsets non-negative, and a lane's waves one after another (each
// starting at or after the previous one's end). INVALID_ARGUMENT naming the
// wave and lane otherwise (e.g. a plan built without SetWaveBytes).
absl::Status CheckWaveBytes(const Plan& plan);

}  // namespace refit

#endif  // REFIT_PLAN_WAVE_BYTES_H_
