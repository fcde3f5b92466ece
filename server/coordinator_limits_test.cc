// Coordinator under hostile or faulty input: a plan function that throws,
// and the bounds on what one peer can make refitd hold.
#include <new>
#include <stdexcept>

#include "server/bounded_text.h"
#include "server/coordinator.h"
#include "server/coordinator_testing.h"

namespace refit {
namespace {

using namespace coordinator_testing;  // NOLINT: test helpers

TEST(CoordinatorLimitsTest, APlanFunctionThatThrowsIsAPlanErrorNotACrash) {
  for (int kind = 0; kind < 2; ++kind) {
    Coordinator::Options o = TestOptions();
    o.plan_function = [kind](const std::vector<v1::Registration>&,
                             const std::vector<v1::Registration>&)
        -> absl::StatusOr<BuiltPlan> {
      if (kind == 0) throw std::bad_alloc();
      throw std::runtime_error("boom");
    };
    auto c = Make(std::move(o));
    const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
    Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
    auto p = AwaitPlan(*c, t);
    EXPECT_EQ(p.status().code(), kind == 0 ? absl::StatusCode::kResourceExhausted
                                           : absl::StatusCode::kInternal)
        << p.status();
    // refitd goes on: it still answers.
    EXPECT_EQ(c->GetStatus().members_size(), 2);
  }
}

TEST(CoordinatorLimitsTest, AFailureReasonIsCutAndSharedByEveryStream) {
  auto c = Make();
  FakeStream ts, es;
  std::vector<std::string> ids = ReadyForRounds(*c, ts, es);
  ASSERT_TRUE(c->StartRound(Start(ids[0], 1)).ok());
  v1::ReportRequest failed = Done(ids[1], 1, /*ok=*/false);
  failed.set_reason(std::string(20 << 20, 'r'));
  ASSERT_TRUE(c->Report(failed).ok());
  v1::RoundEvent aborted = ts.WaitFor(v1::RoundEvent::ROUND_ABORTED);
  EXPECT_EQ(aborted.version(), 1);
  EXPECT_LE(aborted.reason().size(), kMaxReasonBytes + 256);
  EXPECT_NE(aborted.reason().find("bytes cut]"), std::string::npos);
  v1::StatusResponse status = c->GetStatus();
  ASSERT_GE(status.rounds_size(), 1);
  EXPECT_LE(status.rounds(0).reason().size(), kMaxReasonBytes + 256);
}

TEST(CoordinatorLimitsTest, APlanErrorIsCut) {
  Coordinator::Options o = TestOptions();
  o.plan_function = [](const std::vector<v1::Registration>&,
                       const std::vector<v1::Registration>&)
      -> absl::StatusOr<BuiltPlan> {
    return absl::InvalidArgumentError(std::string(60 << 20, 'e'));
  };
  auto c = Make(std::move(o));
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  auto p = AwaitPlan(*c, t);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LE(p.status().message().size(), kMaxReasonBytes + 256);
  EXPECT_LE(c->GetStatus().plan_error().size(), kMaxReasonBytes + 256);
}

TEST(CoordinatorLimitsTest, KeyValueStoreHasQuotasAndOwners) {
  Coordinator::Options o = TestOptions();
  o.kv_quota = {1 << 10, 4 << 10};
  auto c = Make(std::move(o));
  v1::KvSetRequest set;
  set.set_member_id("trainer/job/0");
  set.set_key("k");
  set.set_value(std::string(2 << 10, 'v'));
  absl::Status s = c->KvSet(set);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("trainer/job/0"), std::string::npos) << s;
  set.set_value("mine");
  ASSERT_TRUE(c->KvSet(set).ok());
  set.set_member_id("engine/job/A/0");
  set.set_value("forged");
  EXPECT_EQ(c->KvSet(set).code(), absl::StatusCode::kPermissionDenied);
}

TEST(CoordinatorLimitsTest, BuffersPerRegistrationAreCapped) {
  Coordinator::Options o = TestOptions();
  o.max_buffers_per_member = 8;
  auto c = Make(std::move(o));
  std::vector<std::string> names;
  for (int i = 0; i < 9; ++i) names.push_back(absl::StrCat("w", i));
  absl::Status s = c->Register(Reg(v1::SIDE_TRAINER, "", 0, 1, names)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  names.pop_back();
  EXPECT_TRUE(c->Register(Reg(v1::SIDE_TRAINER, "", 0, 1, names)).ok());
}

TEST(CoordinatorLimitsTest, AStaleTrainerEpochIsRefusedBeforeTheRoundStarts) {
  auto c = Make();
  FakeStream ts, es;
  std::vector<std::string> ids = ReadyForRounds(*c, ts, es);
  auto plan = AwaitPlan(*c, ids[0]);
  ASSERT_TRUE(plan.ok());
  const int64_t prepared = plan->epoch();
  // A second engine joins: the trainer's prepared plan is stale.
  Register(*c, Reg(v1::SIDE_ENGINE, "B", 0, 1));
  v1::StartRoundRequest start = Start(ids[0], 1);
  start.set_plan_epoch(prepared);
  absl::Status s = c->StartRound(start).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(absl::StrCat("epoch ", prepared)), std::string::npos) << s;
  EXPECT_EQ(c->GetStatus().rounds_size(), 0);  // no round started, none wasted
  // With the new plan's epoch it starts.
  auto fresh = AwaitPlan(*c, ids[0], absl::Seconds(5), prepared + 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  FakeStream bs;
  ASSERT_TRUE(c->Watch("engine/job/B/0", &bs).ok());
  start.set_plan_epoch(fresh->epoch());
  EXPECT_TRUE(c->StartRound(start).ok());
}

}  // namespace
}  // namespace refit
