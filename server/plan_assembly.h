// From a complete membership to what each member is handed: running the plan
// function (after the data-plane check), and assembling each member's
// AwaitPlan answer — its data-plane bootstrap and which slice is its own.
#ifndef REFIT_SERVER_PLAN_ASSEMBLY_H_
#define REFIT_SERVER_PLAN_ASSEMBLY_H_

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/refit_service.pb.h"
#include "server/membership.h"
#include "server/plan_function.h"

namespace refit {

// Returns `plan`'s outcome for `input`: CheckDataPlane's INVALID_ARGUMENT
// when the members cannot connect (the plan function is not called), the
// plan function's own error, RESOURCE_EXHAUSTED when it threw std::bad_alloc,
// INTERNAL when it threw anything else or returned another number of slices
// than members. Never lets an exception through. The result carries each
// pair's data plane (BuiltPlan::host_of_member and what follows): on the
// colocated pull path (transport pull) pairs of one host pull and the others
// go over NCCL; INVALID_ARGUMENT naming both members when two members with a
// pair on NCCL share a GPU (NCCL connects one rank per GPU).
absl::StatusOr<BuiltPlan> RunPlanFunction(const PlanFunction& plan,
                                          const PlanInput& input);

// How long RunPlanFunctionOnItsOwnThread waits for a build once `stop` is
// set.
inline constexpr absl::Duration kPlanBuildGrace = absl::Seconds(2);

// Runs RunPlanFunction(plan, *input) on a thread of its own and returns its
// result; or nullopt when `stop` was set and the build did not end within
// kPlanBuildGrace after (the thread is left to finish on its own: it holds
// copies of `plan` and `input`, nothing of the caller).
std::optional<absl::StatusOr<BuiltPlan>> RunPlanFunctionOnItsOwnThread(
    const PlanFunction& plan, std::shared_ptr<const PlanInput> input,
    const std::atomic<bool>& stop);

// One member's share of the current plan.
struct MemberPlan {
  v1::AwaitPlanResponse head;  // epoch, fingerprint, bootstrap; no slice yet
  bool trainer = false;        // its slice is in trainer_slices (else engine_)
  size_t index = 0;            // into that vector
  // The plan's engine rank of an engine member (its slice's SliceBounds, or
  // else its index among the engine members); -1 on trainers.
  int32_t engine_rank = -1;
  // What its slice moves (into `built`'s bounds); null when the plan
  // function does not say.
  const SliceBounds* bounds = nullptr;
};

// Returns, by member id, what each member of `input` is handed for `built`:
// global ranks (trainer ranks first, then engines in input order), the lane
// count, the KV prefix "<kv_prefix>/<plan_fingerprint>/", the engine index
// (engines by id; -1 on trainers), each pair's data plane (hosts and the
// network transport's members), the engines of its data-plane peers (names
// for errors) and each one's SliceBounds (pointers into
// `built`, which must outlive the result).
std::map<std::string, MemberPlan> AssembleMemberPlans(
    const PlanInput& input, const BuiltPlan& built,
    const std::string& plan_fingerprint, const std::string& kv_prefix);

}  // namespace refit

#endif  // REFIT_SERVER_PLAN_ASSEMBLY_H_
