// DefaultPlanFunction: refitd's production plan function — the mapping
// tables (mapping/) turn every member's model and convention into the two
// sides' layouts, what each member registered is checked against them, and
// the planner (plan/planner.h) builds the plan, cut into one slice per
// member.
#ifndef REFIT_SERVER_DEFAULT_PLAN_H_
#define REFIT_SERVER_DEFAULT_PLAN_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstdint>
#include <string>
#include <thread>

#include "plan/host_delta.h"
#include "plan/plan.h"
#include "server/plan_function.h"

namespace refit {

struct DefaultPlanOptions {
  PlannerOptions planner;  // staging budget, lanes, message cap
  // Plans estimated (EstimatePlanRecords) above this many bytes are refused
  // with RESOURCE_EXHAUSTED naming budget_name, before any layout is built.
  int64_t max_plan_bytes = int64_t{16} << 30;
  std::string budget_name = "DefaultPlanOptions::max_plan_bytes";
  // Threads that build the members' slices (one per member, ~7 ms each at
  // DeepSeek-V3 scale).
  int slice_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Members on host memory (no GPU): the links their rounds are predicted
  // at, and whether delta rounds pay there (plan/host_delta.h).
  HostDeltaModel host_delta;
  // When set and true, a build in progress stops at its next phase (the
  // planner's phases included: PlannerOptions::cancel) with CANCELLED
  // (refitd sets it on SIGTERM, so shutdown never waits for a long build).
  std::shared_ptr<const std::atomic<bool>> cancel;
};

// Returns the plan function refitd uses when none is injected.
//
// The membership is: the trainer's ranks (one convention, e.g.
// "megatron:tp=2,pp=2", or "fsdp:dp=4") and one or more engines, each with
// its own id and convention ("vllm:tp=2,dp=1", "sglang:tp=4"). Every member
// names the same model (a built-in name or config.json text). The engines'
// ranks are numbered one after the other in engine-id order to form the
// plan's destination side (engine e's rank r is destination rank
// offset(e) + r), so one plan fills every engine; each engine replica gets
// its bytes straight from the trainer. The plan is job/job_plan.h's PlanJob
// with the members' host_ids as the placement (unknown unless every member
// reported one: then every pair counts as inter-host) and their
// device_uuids as their GPUs (members on one GPU copy within it; a member
// without one has an unknown GPU), so `refit plan` with the same hosts and
// GPUs builds the same plan and fingerprint.
//
// The function fails with INVALID_ARGUMENT naming the member (side, engine,
// rank) and the parameter when: the members disagree on the model or (within
// a side / an engine) on the convention; a convention or model cannot be
// parsed or cannot hold the model (e.g. tp not dividing the heads); a
// member's world size or rank disagrees with its convention; ranks are
// missing, or the model has more layers than the buffers registered could
// hold (CheckRegisteredBuffers: all checked before any layout is built);
// with CANCELLED when options.cancel is set; with RESOURCE_EXHAUSTED
// naming options.budget_name when the plan's estimated size is over
// options.max_plan_bytes; when a member's registered buffers differ from what the mapping
// expects of its rank (unknown or missing parameter, shape, dtype, byte
// size); or the planner rejects the plan (its message, naming tensor, box
// and ranks).
PlanFunction DefaultPlanFunction(DefaultPlanOptions options = {});

}  // namespace refit

#endif  // REFIT_SERVER_DEFAULT_PLAN_H_
