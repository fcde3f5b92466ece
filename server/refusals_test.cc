#include "server/refusals.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RefusalsTest, PlanErrorNamesTheMemberAndItsReason) {
  Refusals r(8);
  EXPECT_TRUE(r.AsPlanError().ok());
  ASSERT_TRUE(r.Add("e0/1", "engine e0 rank 1", "layer l0.experts: TRTLLM", kT0).ok());
  const absl::Status s = r.AsPlanError();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("engine e0 rank 1 refused to join: layer l0.experts: TRTLLM"));
}

TEST(RefusalsTest, ClearedWhenTheMemberRegisters) {
  Refusals r(8);
  ASSERT_TRUE(r.Add("e0/1", "engine e0 rank 1", "why", kT0).ok());
  EXPECT_TRUE(r.Clear("e0/1"));
  EXPECT_FALSE(r.Clear("e0/1"));
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(r.AsPlanError().ok());
}

TEST(RefusalsTest, ExpiresAfterTtl) {
  Refusals r(8);
  ASSERT_TRUE(r.Add("a", "engine e0 rank 0", "old", kT0).ok());
  ASSERT_TRUE(r.Add("b", "engine e0 rank 1", "new", kT0 + absl::Seconds(20)).ok());
  EXPECT_EQ(r.Expire(kT0 + absl::Seconds(25), absl::Seconds(10)), 1u);
  EXPECT_THAT(r.AsPlanError().message(), HasSubstr("rank 1 refused to join: new"));
  EXPECT_THAT(r.AsPlanError().message(), Not(HasSubstr("old")));
}

TEST(RefusalsTest, BoundedInCountAndText) {
  Refusals r(2);
  ASSERT_TRUE(r.Add("a", "engine e0 rank 0", "x", kT0).ok());
  ASSERT_TRUE(r.Add("b", "engine e0 rank 1", "y", kT0).ok());
  EXPECT_EQ(r.Add("c", "engine e0 rank 2", "z", kT0).code(),
            absl::StatusCode::kResourceExhausted);
  // The same member refusing again replaces its refusal.
  EXPECT_TRUE(r.Add("b", "engine e0 rank 1", std::string(1 << 20, 'w'), kT0).ok());
  EXPECT_LT(r.AsPlanError().message().size(), 4096u + 200u);
  EXPECT_EQ(r.Add("d", "engine e0 rank 3", "", kT0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RefusalsTest, ManyRefusalsNameAFewAndCountTheRest) {
  Refusals r(16);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(r.Add(std::to_string(i), "engine e0 rank " + std::to_string(i), "why", kT0).ok());
  }
  EXPECT_THAT(r.AsPlanError().message(), HasSubstr("and 6 more members refused"));
  EXPECT_EQ(r.Describe().size(), 10u);
}

}  // namespace
}  // namespace refit
