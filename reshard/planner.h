// BuildPlan: the planner, a pure function from two layouts to a Plan.
#ifndef REFIT_RESHARD_PLANNER_H_
#define REFIT_RESHARD_PLANNER_H_

#include "absl/status/statusor.h"
#include "reshard/layout.h"
#include "reshard/plan.h"

namespace refit {

// Builds the transfer plan that fills every destination record from the
// source records of the same tensor name.
//
// Fails with INVALID_ARGUMENT, naming tensor, box and ranks, when: a record
// is invalid (ValidateRecord); a dst tensor has no src tensor of that name,
// or their shapes or dtypes differ; a destination box has no source, or is
// covered twice on one dst rank's buffers; two records overlap in one
// destination buffer; a destination buffer byte is claimed by no record and
// not declared padding. All errors found are reported, one per line.
absl::StatusOr<Plan> BuildPlan(const SideLayout& src, const SideLayout& dst,
                               const PlannerOptions& options);

}  // namespace refit

#endif  // REFIT_RESHARD_PLANNER_H_
