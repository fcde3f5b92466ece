// Waves: messages scheduled into waves and lanes under the staging
// budget, then emitted in wave order.
#ifndef REFIT_PLAN_INTERNAL_WAVES_H_
#define REFIT_PLAN_INTERNAL_WAVES_H_

#include <cstdint>
#include <vector>

#include "plan/internal/messages.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Places the messages next-fit into waves of their stage, so that per
// wave each rank's staged bytes are <= LaneBudget(options) and all its
// bytes <= WaveCap(options) (a bigger message alone in a wave), keeping
// each pair's order; then interleaves the stages' waves (wave k of each
// stage, in stage order) and gives each wave its lane (see planner.h).
// Sets every message's m.wave and appends the waves to *waves (no
// messages yet). `src_world`/`dst_world`: the world sizes. Messages are
// placed in (stage, seq, src rank, dst rank) order; that is linear when
// `messages` come in pair order (CoalesceMessages), sorted otherwise.
// Never fails.
void ScheduleWaves(const PlannerOptions& options,
                                    int32_t src_world, int32_t dst_world,
                                    std::vector<PendingMessage>* messages,
                                    std::vector<Wave>* waves);

// Writes plan->messages in (wave, src rank, dst rank, seq) order and each
// wave's first_message and num_messages; m.wave must be set
// (ScheduleWaves). Linear when `messages` come in pair order
// (CoalesceMessages), sorted otherwise. Never fails.
void EmitMessages(const std::vector<PendingMessage>& messages, Plan* plan);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_WAVES_H_
