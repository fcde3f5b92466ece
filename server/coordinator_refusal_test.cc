// A member that cannot join says so (Coordinator::Refuse): the members
// waiting for a plan fail at once naming it, not at their deadlines.
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "server/coordinator.h"
#include "testing/coordinator_testing.h"

namespace refit {
namespace {

using namespace coordinator_testing;  // NOLINT: test helpers
using ::testing::HasSubstr;

constexpr char kWhy[] = "layer model.layers.0.mlp.experts: FlashInfer TRTLLM";

TEST(CoordinatorRefusalTest, AParkedPlanWaitFailsAtOnceNamingTheMemberAndWhy) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 2));  // rank 1 of engine A is missing
  absl::StatusOr<v1::AwaitPlanResponse> plan;
  const absl::Time start = absl::Now();
  std::thread waiter([&] { plan = AwaitPlan(*c, t, absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy).ok());
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("refused to join"));
  EXPECT_THAT(plan.status().message(), HasSubstr(kWhy));
  EXPECT_THAT(plan.status().message(), HasSubstr("rank 1"));
  // An operator sees it in the status, and a later wait fails the same way.
  v1::StatusResponse status = c->GetStatus();
  ASSERT_EQ(status.refusals_size(), 1);
  EXPECT_THAT(status.refusals(0), HasSubstr(kWhy));
  EXPECT_EQ(AwaitPlan(*c, t, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CoordinatorRefusalTest, TheMemberRegisteringWithdrawsItsRefusal) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 2));
  ASSERT_TRUE(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy).ok());
  EXPECT_EQ(AwaitPlan(*c, t, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The worker restarted with a setting refit writes.
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 1, 2));
  EXPECT_TRUE(AwaitPlan(*c, t).ok());
  EXPECT_EQ(c->GetStatus().refusals_size(), 0);
}

TEST(CoordinatorRefusalTest, ARefusalExpiresAfterTheHeartbeatTimeout) {
  Coordinator::Options o = TestOptions();
  o.heartbeat_timeout = absl::Milliseconds(300);
  auto c = Make(std::move(o));
  ASSERT_TRUE(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy).ok());
  EXPECT_EQ(c->GetStatus().refusals_size(), 1);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(c->GetStatus().refusals_size(), 0);
}

TEST(CoordinatorRefusalTest, NoRefusalWithoutTheJobKeyOrForARegisteredMember) {
  Coordinator::Options o = TestOptions();
  o.job_key = "key";
  auto c = Make(std::move(o));
  EXPECT_EQ(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy, "", "wrong").status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(c->Register(Reg(v1::SIDE_ENGINE, "A", 0, 2), "", "key").ok());
  // A member registered now cannot be made to refuse (by itself or another).
  absl::Status s = c->Refuse(Reg(v1::SIDE_ENGINE, "A", 0, 2, {}), kWhy, "", "key").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), kWhy, "", "key").ok());
  // A malformed identity is refused as a registration is.
  EXPECT_EQ(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 5, 2, {}), kWhy, "", "key").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Refuse(Reg(v1::SIDE_ENGINE, "A", 1, 2, {}), "", "", "key").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit
