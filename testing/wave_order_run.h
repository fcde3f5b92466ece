// WaveOrderRun: runs a plan (relays included) message by message in wave
// order on host memory, checking that relays read only what earlier waves
// wrote: a test oracle for relay plans of the planner.
#ifndef REFIT_TESTING_WAVE_ORDER_RUN_H_
#define REFIT_TESTING_WAVE_ORDER_RUN_H_

#include <string>

#include "plan/plan.h"

namespace refit {
namespace testing {

// Fills the trainer's buffers with the pattern (testing/reference_copy.h),
// copies every segment of `plan` in message order element by element (a
// relay from the engine's buffers as the earlier messages left them), and
// checks every engine byte. Returns "" when every engine byte holds its
// pattern, no engine byte was written twice, every relay read only bytes
// of its own tensor that a strictly earlier wave wrote, and (for a plan
// without conversions) ReferenceCopy agrees; else the first problem,
// naming the message's ranks and wave.
std::string RunInWaveOrder(const Plan& plan);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_WAVE_ORDER_RUN_H_
