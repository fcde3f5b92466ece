// DefaultPlanFunction (see default_plan.h).
#include "server/default_plan.h"

namespace refit {

PlanFunction DefaultPlanFunction() {
  return [](const std::vector<v1::Registration>&,
            const std::vector<v1::Registration>&) -> absl::StatusOr<BuiltPlan> {
    return absl::UnimplementedError(
        "refitd was built without the planner (mapping + BuildPlan not wired yet)");
  };
}

}  // namespace refit
