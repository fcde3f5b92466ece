// The planner's first phases: its options, each layout on its own, and the
// match of destination tensors to source tensors by name.
#ifndef REFIT_PLAN_INTERNAL_VALIDATE_H_
#define REFIT_PLAN_INTERNAL_VALIDATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Returns OK, or INVALID_ARGUMENT listing every option when one is out of
// range (num_lanes < 1, staging_budget_bytes < 1, a negative byte limit).
absl::Status ValidateOptions(const PlannerOptions& options);

// Checks the trainer (src) and engine (dst) layouts: world sizes, tensor
// specs, a transform on a trainer tensor, buffer ranks and sizes, records
// (ValidateRecord; skipped once an earlier check failed), host_of_rank,
// stage_of_rank and gpu_of_rank (lengths, ids >= -1, GPUs only with hosts,
// one host per GPU id over both sides). Appends one line per problem to
// *errors.
void ValidateLayouts(const SideLayout& src, const SideLayout& dst,
                     std::vector<std::string>* errors);

// Matches every dst tensor to the src tensor of the same name: sets
// *dst_to_src (dst tensor index -> src tensor index, -1 where unmatched).
// Appends one line per problem to *errors: a name listed twice on a side, a
// dst tensor with no src tensor, or a pair whose shape, dtype or stacking
// differ.
void MatchTensors(const SideLayout& src, const SideLayout& dst,
                  std::vector<int32_t>* dst_to_src,
                  std::vector<std::string>* errors);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_VALIDATE_H_
