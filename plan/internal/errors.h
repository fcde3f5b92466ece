// Error reporting shared by the planner's phases: every phase appends one
// line per problem, and the planner returns them together.
#ifndef REFIT_PLAN_INTERNAL_ERRORS_H_
#define REFIT_PLAN_INTERNAL_ERRORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace refit {
namespace internal_plan {

// Returns "engine rank <r>", how errors name a destination rank.
std::string DstRank(int32_t r);

// Returns INVALID_ARGUMENT with the errors one per line (the first 50, then
// a line counting the rest); callers pass at least one error.
absl::Status JoinErrors(const std::vector<std::string>& errors);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_ERRORS_H_
