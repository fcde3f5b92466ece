// BuildPlan: the planner, a pure function from two layouts to a Plan.
#ifndef REFIT_RESHARD_PLANNER_H_
#define REFIT_RESHARD_PLANNER_H_

#include <string>

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
//
// Replica choice (deterministic greedy): every (dst record, disjoint source
// piece) intersection is a candidate; candidates are processed by bytes
// descending, then dst tensor, box, dst rank, dst record index; each goes to
// the replica whose src rank has the fewest bytes assigned so far; ties go
// to a replica on the dst rank's host (when host_of_rank is given on both
// sides and options.prefer_same_host), then to the lowest src rank (then
// lowest record index). Overlapping (non-identical) source boxes are cut
// into disjoint grid cells, so every element is sent exactly once.
//
// Segments larger than min(max_message_bytes or the per-lane budget, the
// per-lane budget) are split along their outermost dim with extent > 1.
// Segments of one (stage, src rank, dst rank) are ordered by (dst buffer,
// dst byte offset, tensor, box) and packed greedily into messages of at
// most that cap. Messages go first-fit into rounds of their stage (stage =
// src.stage_of_rank[src rank], 0 if empty) so that each rank's staging
// (bytes of its non-contiguous sends + receives) per round is <=
// staging_budget_bytes / num_lanes, and a (src, dst) pair appears at most
// once per round. Rounds of different stages are interleaved (round k of
// each stage in stage order); lane = stage % num_lanes when there are >= 2
// stages, else round index % num_lanes.
//
// Fails with INVALID_ARGUMENT also for invalid options (num_lanes < 1,
// budget < 1, per-lane budget smaller than one element).
absl::StatusOr<Plan> BuildPlan(const SideLayout& src, const SideLayout& dst,
                               const PlannerOptions& options);

// The fingerprint of a plan: a 128-bit hex digest (32 lowercase hex chars)
// over a canonical serialization of every field except `stats` and
// `fingerprint` itself. BuildPlan sets plan.fingerprint to this.
std::string PlanFingerprint(const Plan& plan);

}  // namespace refit

#endif  // REFIT_RESHARD_PLANNER_H_
