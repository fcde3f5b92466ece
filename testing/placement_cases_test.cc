// Every placed layout of the table plans within 5% of its lower bound;
// colocated jobs whose replicas line up with hosts move no byte across
// hosts, and some within one GPU; a job whose PP stages span hosts must
// move some across.
#include "testing/placement_cases.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

void CheckCase(const PlacementCase& c) {
  SCOPED_TRACE(c.name);
  absl::StatusOr<Plan> plan = PlanPlacementCase(c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PlanStats& s = plan->stats;
  ASSERT_GT(s.lower_bound_seconds, 0);
  EXPECT_GE(s.predicted_seconds, s.lower_bound_seconds * (1 - 1e-9));
  EXPECT_LE(s.predicted_seconds, 1.05 * s.lower_bound_seconds)
      << "predicted " << s.predicted_seconds << " s, bound "
      << s.lower_bound_seconds << " s";
  EXPECT_EQ(s.same_gpu_bytes + s.intra_host_bytes + s.inter_host_bytes, s.total_bytes);
  if (c.expect_no_inter) {
    EXPECT_EQ(s.inter_host_bytes, 0);
  }
  if (c.colocated) {
    EXPECT_GT(s.same_gpu_bytes, 0);  // engine rank r on trainer rank r's GPU
  } else {
    // Trainer and engines on other hosts.
    EXPECT_EQ(s.same_gpu_bytes + s.intra_host_bytes, 0);
  }
}

TEST(PlacementCasesTest, SmallLayoutsPlanWithin5PercentOfTheBound) {
  int n = 0;
  bool pp_across_hosts = false;
  for (const PlacementCase& c : PlacementCases()) {
    if (c.large) continue;
    CheckCase(c);
    ++n;
    if (c.colocated && c.trainer.find("pp=") != std::string::npos) {
      absl::StatusOr<Plan> plan = PlanPlacementCase(c);
      ASSERT_TRUE(plan.ok());
      EXPECT_GT(plan->stats.inter_host_bytes, 0);
      EXPECT_GT(plan->stats.same_gpu_bytes + plan->stats.intra_host_bytes, 0);
      pp_across_hosts = true;
    }
  }
  EXPECT_GE(n, 6);
  EXPECT_TRUE(pp_across_hosts);
}

TEST(PlacementCasesTest, DeepSeekV3AndKimiK2At256RanksPlanWithin5PercentOfTheBound) {
  int n = 0;
  for (const PlacementCase& c : PlacementCases()) {
    if (!c.large) continue;
    CheckCase(c);
    ++n;
  }
  EXPECT_GE(n, 2);
}

TEST(PlacementCasesTest, ThePlacementChangesThePlan) {
  PlacementCase c = PlacementCases()[0];
  absl::StatusOr<Plan> colocated = PlanPlacementCase(c);
  c.colocated = false;
  absl::StatusOr<Plan> apart = PlanPlacementCase(c);
  ASSERT_TRUE(colocated.ok() && apart.ok());
  EXPECT_NE(colocated->fingerprint, apart->fingerprint);
  EXPECT_LT(colocated->stats.predicted_seconds, apart->stats.predicted_seconds / 5);
}

}  // namespace
}  // namespace refit
