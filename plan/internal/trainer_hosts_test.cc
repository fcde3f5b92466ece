// OnTrainerHosts: per engine rank whether a trainer rank shares its host,
// nothing when the placement is unknown.
#include "plan/internal/trainer_hosts.h"

#include <vector>

#include "gtest/gtest.h"
#include "layout/layout.h"
#include "plan/cost.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {
namespace {

// Trainer ranks on hosts {3, 1, 3}; engine ranks on hosts {0, 1, 2, 3, 1}.
void Sides(SideLayout* src, SideLayout* dst) {
  src->world_size = 3;
  src->host_of_rank = {3, 1, 3};
  dst->world_size = 5;
  dst->host_of_rank = {0, 1, 2, 3, 1};
}

TEST(OnTrainerHostsTest, MarksEngineRanksWhoseHostHoldsATrainerRank) {
  SideLayout src, dst;
  Sides(&src, &dst);
  const PlannerOptions options;
  const CostModel cost(src, dst, options);
  const std::vector<char> on = OnTrainerHosts(src, dst, cost);
  EXPECT_EQ(on, (std::vector<char>{0, 1, 0, 1, 1}));
  EXPECT_TRUE(SharesHosts(on));
}

TEST(OnTrainerHostsTest, DisjointHostsMarkNone) {
  SideLayout src, dst;
  Sides(&src, &dst);
  src.host_of_rank = {7, 8, 9};
  const PlannerOptions options;
  const CostModel cost(src, dst, options);
  const std::vector<char> on = OnTrainerHosts(src, dst, cost);
  EXPECT_EQ(on, std::vector<char>(5, 0));
  EXPECT_FALSE(SharesHosts(on));
}

TEST(OnTrainerHostsTest, UnknownPlacementGivesNothing) {
  SideLayout src, dst;
  Sides(&src, &dst);
  PlannerOptions options;
  {
    SideLayout partial = dst;
    partial.host_of_rank.pop_back();  // not one host per rank
    const CostModel cost(src, partial, options);
    EXPECT_TRUE(OnTrainerHosts(src, partial, cost).empty());
  }
  {
    SideLayout none = src;
    none.host_of_rank.clear();
    const CostModel cost(none, dst, options);
    EXPECT_TRUE(OnTrainerHosts(none, dst, cost).empty());
  }
  options.prefer_same_host = false;  // placement ignored
  const CostModel cost(src, dst, options);
  const std::vector<char> on = OnTrainerHosts(src, dst, cost);
  EXPECT_TRUE(on.empty());
  EXPECT_FALSE(SharesHosts(on));
}

}  // namespace
}  // namespace internal_plan
}  // namespace refit
