// A test's model, its trainer and engine layouts and the plan between
// them, from a built-in model name and two convention strings: what most
// data-plane and mapping tests build first.
#ifndef REFIT_TESTING_PLANNED_CASE_H_
#define REFIT_TESTING_PLANNED_CASE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "mapping/mapping.h"
#include "plan/planner.h"

namespace refit {
namespace testing {

// Optionals, so that tests read them as they read the StatusOr of each
// step: `*model`, `src->layout`, `plan->conversions`.
struct PlannedCase {
  std::optional<ModelConfig> model;
  std::optional<MappedSide> src, dst;
  std::optional<Plan> plan;
};

// Fills *out step by step; the first failing step's status, annotated with
// the model and the convention concerned.
absl::Status PlanCase(const std::string& model, const std::string& trainer,
                      const std::string& engine, PlannedCase* out,
                      const PlannerOptions& options = PlannerOptions{});

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_PLANNED_CASE_H_
