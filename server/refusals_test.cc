#include "server/refusals.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RefusalsTest, PlanErrorNamesTheMemberAndItsReason) {
  Refusals r(8);
  EXPECT_TRUE(r.AsPlanError("j").ok());
  ASSERT_TRUE(r.Add("e0/1", "j", "engine e0 rank 1", "layer l0.experts: TRTLLM", kT0).ok());
  const absl::Status s = r.AsPlanError("j");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("engine e0 rank 1 refused to join: layer l0.experts: TRTLLM"));
}

TEST(RefusalsTest, ClearedWhenTheMemberRegisters) {
  Refusals r(8);
  ASSERT_TRUE(r.Add("e0/1", "j", "engine e0 rank 1", "why", kT0).ok());
  EXPECT_TRUE(r.Clear("e0/1"));
  EXPECT_FALSE(r.Clear("e0/1"));
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(r.AsPlanError("j").ok());
}

TEST(RefusalsTest, ExpiresAfterTtl) {
  Refusals r(8);
  ASSERT_TRUE(r.Add("a", "j", "engine e0 rank 0", "old", kT0).ok());
  ASSERT_TRUE(r.Add("b", "j", "engine e0 rank 1", "new", kT0 + absl::Seconds(20)).ok());
  EXPECT_EQ(r.Expire(kT0 + absl::Seconds(25), absl::Seconds(10)), 1u);
  EXPECT_THAT(r.AsPlanError("j").message(), HasSubstr("rank 1 refused to join: new"));
  EXPECT_THAT(r.AsPlanError("j").message(), Not(HasSubstr("old")));
}

TEST(RefusalsTest, BoundedInCountAndText) {
  Refusals r(2);
  ASSERT_TRUE(r.Add("a", "j", "engine e0 rank 0", "x", kT0).ok());
  ASSERT_TRUE(r.Add("b", "j", "engine e0 rank 1", "y", kT0).ok());
  EXPECT_EQ(r.Add("c", "j", "engine e0 rank 2", "z", kT0).code(),
            absl::StatusCode::kResourceExhausted);
  // The same member refusing again replaces its refusal.
  EXPECT_TRUE(r.Add("b", "j", "engine e0 rank 1", std::string(1 << 20, 'w'), kT0).ok());
  EXPECT_LE(r.AsPlanError("j").message().size(), Refusals::kMaxErrorBytes);
  EXPECT_EQ(r.Add("d", "j", "engine e0 rank 3", "", kT0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RefusalsTest, ManyRefusalsNameAFewAndCountTheRest) {
  Refusals r(16);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(r.Add(std::to_string(i), "j", "engine e0 rank " + std::to_string(i), "why", kT0).ok());
  }
  EXPECT_THAT(r.AsPlanError("j").message(), HasSubstr("and 6 more members refused"));
  EXPECT_EQ(r.Describe().size(), 10u);
}

// A refusal fails only its own job's plan waits: one under another job name
// (made up or not) leaves this job's plan alone.
TEST(RefusalsTest, ARefusalTouchesOnlyItsJob) {
  Refusals r(8);
  ASSERT_TRUE(r.Add("x", "other", "engine ghost rank 0", "made up", kT0).ok());
  EXPECT_TRUE(r.AsPlanError("j").ok());
  EXPECT_FALSE(r.AsPlanError("other").ok());
}

TEST(RefusalsTest, ReasonsAreEscapedAndBoundedPerJob) {
  Refusals r(Refusals::kMaxPerJob + 8);
  ASSERT_TRUE(r.Add("a", "j", "engine e0 rank 0", "bad\x1b[2J\nlayout", kT0).ok());
  const std::string msg(r.AsPlanError("j").message());
  EXPECT_THAT(msg, HasSubstr("bad\\x1b[2J"));
  for (size_t i = 1; i < Refusals::kMaxPerJob; ++i) {
    ASSERT_TRUE(r.Add(std::to_string(i), "j", "engine e0 rank", "why", kT0).ok());
  }
  EXPECT_EQ(r.Add("one more", "j", "engine e0 rank", "why", kT0).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(r.Add("another job", "k", "engine e1 rank 0", "why", kT0).ok());
  EXPECT_EQ(r.Describe().size(), Refusals::kListed + 1);
  EXPECT_THAT(r.Describe().back(), HasSubstr("more refusals"));
}

// With every place held by refusals of other jobs, a job's own refusals
// take the place of the oldest of the job holding the most, until the two
// hold as many.
TEST(RefusalsTest, OtherJobsRefusalsNeverKeepAJobsOwnOut) {
  Refusals r(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(r.Add(absl::StrCat("o", i), "other", "engine ghost rank 0", "made up",
                      kT0 + absl::Seconds(i))
                    .ok());
  }
  ASSERT_TRUE(r.Add("a", "j", "engine e0 rank 0", "bad layout", kT0).ok());
  EXPECT_THAT(r.AsPlanError("j").message(), HasSubstr("bad layout"));
  ASSERT_TRUE(r.Add("b", "j", "engine e0 rank 1", "bad layout", kT0).ok());
  EXPECT_EQ(r.Add("c", "j", "engine e0 rank 2", "bad layout", kT0).code(),
            absl::StatusCode::kResourceExhausted);
  // The oldest of the other job's gave way.
  EXPECT_EQ(r.Describe().size(), 4u);
  EXPECT_FALSE(r.Clear("o0"));
  EXPECT_FALSE(r.Clear("o1"));
  EXPECT_TRUE(r.Clear("o2"));
}

}  // namespace
}  // namespace refit
