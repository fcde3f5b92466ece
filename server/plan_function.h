// The plan function refitd calls for a complete membership, and what it
// returns. refitd's production one is DefaultPlanFunction (default_plan.h).
#ifndef REFIT_SERVER_PLAN_FUNCTION_H_
#define REFIT_SERVER_PLAN_FUNCTION_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit_service.pb.h"

namespace refit {

// What the plan function returns: one slice per member, in the order of the
// registrations it was given, plus the data-plane lane count.
struct BuiltPlan {
  int num_lanes = 1;
  // The plan's own fingerprint (PlanFingerprint), which members and
  // `refit status` see; empty: refitd reports the registrations'
  // fingerprint instead.
  std::string fingerprint;
  // Serialized PlanProtos (SerializeAsString), one per member.
  std::vector<std::string> trainer_slices;  // [trainer rank]
  std::vector<std::string> engine_slices;   // [engine member, input order]
};

// Builds the plan for a complete membership. `trainer` is ordered by rank;
// `engine` by (engine id, rank). An error (e.g. the planner's
// INVALID_ARGUMENT) is reported to every member as the plan outcome.
using PlanFunction = std::function<absl::StatusOr<BuiltPlan>(
    const std::vector<v1::Registration>& trainer,
    const std::vector<v1::Registration>& engine)>;

}  // namespace refit

#endif  // REFIT_SERVER_PLAN_FUNCTION_H_
