// A plan function for tests that needs no mapping tables: every trainer rank
// sends each of its buffers to the engine rank holding a buffer of the same
// name (per engine replica). Fails with INVALID_ARGUMENT naming the buffer
// when an engine buffer has no trainer source or the byte sizes differ.
#ifndef REFIT_SERVER_TEST_PLANNER_H_
#define REFIT_SERVER_TEST_PLANNER_H_

#include "server/refit_server.h"

namespace refit {

absl::StatusOr<BuiltPlan> NameMatchingPlan(const std::vector<v1::Registration>& trainer,
                                           const std::vector<v1::Registration>& engine);

}  // namespace refit

#endif  // REFIT_SERVER_TEST_PLANNER_H_
