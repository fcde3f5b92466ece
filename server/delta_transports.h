// Which memberships delta rounds (refitd --delta) can run on: not the
// colocated pull path. A pull round is one device copy per piece from the
// trainer's memory into the engine's on the same GPU, cheaper than the
// delta codec's reads of two versions, so members on it run every round
// dense; refitd refuses the combination when it plans, naming the member.
#ifndef REFIT_SERVER_DELTA_TRANSPORTS_H_
#define REFIT_SERVER_DELTA_TRANSPORTS_H_

#include "absl/status/status.h"
#include "server/membership.h"

namespace refit {

// OK when every member of `input` registered a transport that delta
// rounds run on; FAILED_PRECONDITION naming the first member that
// registered the pull transport, and what to do instead, otherwise.
absl::Status CheckDeltaTransports(const PlanInput& input);

}  // namespace refit

#endif  // REFIT_SERVER_DELTA_TRANSPORTS_H_
