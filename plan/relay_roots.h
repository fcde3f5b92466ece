// RelayRoots: which trainer rank first sent the bytes a relay message
// forwards (plan.h, Relays). A relay's segment repeats a region its
// relaying engine rank received whole in an earlier message (same record,
// same box); following those hops back ends at a trainer rank's message.
// A trainer rank's plan slice carries the relays of its bytes, so that a
// verified round digests what every relayed replica must hold
// (exec/delta/delta_runner.h, Relays).
#ifndef REFIT_PLAN_RELAY_ROOTS_H_
#define REFIT_PLAN_RELAY_ROOTS_H_

#include <cstdint>
#include <vector>

#include <string>

#include "layout/box.h"
#include "plan/plan.h"

namespace refit {

// Returns, per message of `plan` (same indices), the trainer ranks whose
// messages first sent the bytes of its segments, sorted and distinct:
// empty for a message that is not a relay and for a relay segment that
// repeats no region its sender received whole (a region cut differently).
std::vector<std::vector<int32_t>> RelayRoots(const Plan& plan);

// Returns a key naming where a segment lands (or, for a relay, where it is
// read): engine rank, engine record and box. Equal keys, equal region.
std::string SegmentPlaceKey(int32_t engine_rank, int32_t record, const Box& box);

}  // namespace refit

#endif  // REFIT_PLAN_RELAY_ROOTS_H_
