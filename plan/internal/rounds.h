// Rounds: messages scheduled into rounds and lanes under the staging
// budget, then emitted in round order.
#ifndef REFIT_PLAN_INTERNAL_ROUNDS_H_
#define REFIT_PLAN_INTERNAL_ROUNDS_H_

#include <cstdint>
#include <vector>

#include "plan/internal/messages.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Places the messages next-fit into rounds of their stage, so that per
// round each rank's staged bytes are <= LaneBudget(options) and all its
// bytes <= RoundCap(options) (a bigger message alone in a round), keeping
// each pair's order; then interleaves the stages' rounds (round k of each
// stage, in stage order) and gives each round its lane (see planner.h).
// Sets every message's m.round and appends the rounds to *rounds (no
// messages yet). `src_world`/`dst_world`: the world sizes. Messages are
// placed in (stage, seq, src rank, dst rank) order; that is linear when
// `messages` come in pair order (CoalesceMessages), sorted otherwise.
// Never fails.
void ScheduleRounds(const PlannerOptions& options,
                                    int32_t src_world, int32_t dst_world,
                                    std::vector<PendingMessage>* messages,
                                    std::vector<Round>* rounds);

// Writes plan->messages in (round, src rank, dst rank, seq) order and each
// round's first_message and num_messages; m.round must be set
// (ScheduleRounds). Linear when `messages` come in pair order
// (CoalesceMessages), sorted otherwise. Never fails.
void EmitMessages(const std::vector<PendingMessage>& messages, Plan* plan);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_ROUNDS_H_
