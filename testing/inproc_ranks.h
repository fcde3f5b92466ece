// Runs every rank of a plan as a thread over the in-process transport on
// host buffers: the data plane end to end (executor, conversions, amax
// exchange) without a network, for tests that check the bytes it leaves.
#ifndef REFIT_TESTING_INPROC_RANKS_H_
#define REFIT_TESTING_INPROC_RANKS_H_

#include <vector>

#include "absl/status/status.h"
#include "plan/plan.h"
#include "testing/reference_copy.h"

namespace refit::testing {

// Runs `plan` on the host buffers `src` (trainer, as registered, one per
// plan.src buffer but its scratch) and `dst` (engine); with `slices` each
// rank runs its own slice off the wire (ExtractSlice through the codec), as
// members do. Returns each global rank's status (trainer rank t at t,
// engine rank e at src world + e); a failed rank kills its peers' waits.
std::vector<absl::Status> RunAllRanksInProc(const Plan& plan, const OwnedBuffers& src,
                                            const OwnedBuffers& dst, bool slices);

}  // namespace refit::testing

#endif  // REFIT_TESTING_INPROC_RANKS_H_
