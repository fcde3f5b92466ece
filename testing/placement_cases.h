// The table of placed layouts whose plans must come within 5% of their
// lower bound (predicted / lower bound <= 1.05): colocated jobs whose
// replicas line up with hosts, disaggregated jobs with several trainer DP
// replicas, DeepSeek-V3 and Kimi-K2 at 256 ranks, and a colocated job whose
// trainer PP stages span hosts. Checked by testing/placement_cases_test and
// printed by bench:placement_bench.
#ifndef REFIT_JOB_PLACEMENT_CASES_H_
#define REFIT_JOB_PLACEMENT_CASES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/plan.h"

namespace refit {

struct PlacementCase {
  std::string name;
  std::string model;    // built-in name
  std::string trainer;  // convention
  std::string engine;   // convention
  int32_t gpus_per_host = 8;
  bool colocated = false;
  bool large = false;             // 256-rank models (seconds to plan)
  bool expect_no_inter = false;   // every byte can stay within its host
};

// Returns the table, in a fixed order.
std::vector<PlacementCase> PlacementCases();

// Returns the plan of `c` under its shorthand placement (ShorthandPlacement:
// hosts and GPUs; colocated engine rank r on trainer rank r's GPU), by
// BuildJobPlan with default planner options. Fails with the mapping's or planner's status.
absl::StatusOr<Plan> PlanPlacementCase(const PlacementCase& c);

}  // namespace refit

#endif  // REFIT_JOB_PLACEMENT_CASES_H_
