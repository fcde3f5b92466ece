// A plan function for tests that needs no mapping tables: every trainer rank
// sends each of its buffers to the engine rank holding a buffer of the same
// name (per engine replica). Fails with INVALID_ARGUMENT naming the buffer
// when an engine buffer has no trainer source or the byte sizes differ.
#ifndef REFIT_TESTING_NAME_MATCHING_PLAN_H_
#define REFIT_TESTING_NAME_MATCHING_PLAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit_service.pb.h"
#include "server/plan_function.h"

namespace refit {

// Returns the plan (two lanes), or INVALID_ARGUMENT as above.
absl::StatusOr<BuiltPlan> NameMatchingPlan(const std::vector<v1::Registration>& trainer,
                                           const std::vector<v1::Registration>& engine);

}  // namespace refit

#endif  // REFIT_TESTING_NAME_MATCHING_PLAN_H_
