// Relay messages: the segments engine ranks forward, coalesced and placed
// in waves after the waves that delivered their bytes.
#ifndef REFIT_PLAN_INTERNAL_RELAY_MESSAGES_H_
#define REFIT_PLAN_INTERNAL_RELAY_MESSAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "plan/internal/candidates.h"
#include "plan/internal/messages.h"
#include "plan/internal/relays.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Appends the relay segments and messages of `sources` (depth 1, then 2,
// ...) to plan->segments and *messages. *messages holds the trainer's
// messages with their waves set, whose segments' candidates are
// *segment_cand (one per plan->segments entry; extended here). A relay
// segment (a candidate, or one split of it) is ready one wave after the
// wave that brought its feeder the same region (or, where the feeder's
// bytes came split otherwise, after every wave placed so far). A relay
// pair's segments are ordered by ready wave (then as OrderSegments) and
// coalesced as CoalesceMessages (`cap`, `direct_min`), when `pipelined` a
// message holding segments of one ready wave only; ScheduleRelayWaves
// places each at or after its (last segment's) ready wave, so a pipelined
// chain forwards wave k's bytes in wave k+1 while it receives wave k+1's. Returns OrderSegments' error
// (INVALID_ARGUMENT), else OK.
absl::Status AddRelayMessages(const Candidates& candidates, const Sources& sources,
                              int64_t cap, int64_t direct_min, bool pipelined,
                              std::vector<int32_t>* segment_cand,
                              std::vector<PendingMessage>* messages, Plan* plan);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAY_MESSAGES_H_
