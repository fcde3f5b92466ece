// Coordinator under hostile or faulty input: a plan function that throws,
// and the bounds on what one peer can make refitd hold.
#include <new>
#include <optional>
#include <stdexcept>

#include "absl/strings/match.h"
#include "server/bounded_text.h"
#include "server/coordinator.h"
#include "testing/coordinator_testing.h"

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

// A Report request is refused before it is parsed when it is larger than
// any report of the last plan can be: 80 KiB of other fields plus 1,100
// bytes per digest part its largest slice writes (no plan yet: none).
TEST(CoordinatorLimitsTest, AReportLargerThanThePlanAllowsIsRefusedUnread) {
  Coordinator::Options o = TestOptions();
  o.plan_function = [](const std::vector<v1::Registration>& trainer,
                       const std::vector<v1::Registration>& engine)
      -> absl::StatusOr<BuiltPlan> {
    absl::StatusOr<BuiltPlan> built = NameMatchingPlan(trainer, engine);
    if (built.ok()) {
      built->trainer_bounds.resize(built->trainer_slices.size());
      built->engine_bounds.resize(built->engine_slices.size());
      built->engine_bounds[0].digest_keys.resize(10);
    }
    return built;
  };
  auto c = Make(std::move(o));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->CheckReportSize(80 << 10).ok());
  absl::Status s = c->CheckReportSize((80 << 10) + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "digests: ")) << s;
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(AwaitPlan(*c, t).ok());
  EXPECT_TRUE(c->CheckReportSize((80 << 10) + 10 * 1100).ok());
  EXPECT_FALSE(c->CheckReportSize((80 << 10) + 10 * 1100 + 1).ok());
}

TEST(CoordinatorLimitsTest, AFailureReasonIsCutAndSharedByEveryStream) {
  // Streams outlive the coordinator, which ends a round in flight when it stops.
  FakeStream ts, es;
  auto c = Make();
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
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  const std::string e = Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  v1::KvSetRequest set;
  set.set_member_id(t);
  set.set_member_secret(Secret(t));
  set.set_key("k");
  set.set_value(std::string(2 << 10, 'v'));
  absl::Status s = c->KvSet(set);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("trainer/job/0"), std::string::npos) << s;
  set.set_value("mine");
  ASSERT_TRUE(c->KvSet(set).ok());
  // Another member (with its own secret) cannot overwrite the key.
  set.set_member_id(e);
  set.set_member_secret(Secret(e));
  set.set_value("forged");
  EXPECT_EQ(c->KvSet(set).code(), absl::StatusCode::kPermissionDenied);
  // Nor can a caller that claims to be the owner without its secret.
  set.set_member_id(t);
  set.set_member_secret("guess");
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
  FakeStream ts, es, bs;  // outlive the coordinator
  auto c = Make();
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
  ASSERT_TRUE(c->Watch("engine/job/B/0", Secret("engine/job/B/0"), &bs).ok());
  start.set_plan_epoch(fresh->epoch());
  EXPECT_TRUE(c->StartRound(start).ok());
}

TEST(CoordinatorLimitsTest, OnlyAMemberItselfActsForIt) {
  FakeStream ts, es, thief;  // outlive the coordinator
  auto c = Make();
  std::vector<std::string> ids = ReadyForRounds(*c, ts, es);
  ASSERT_TRUE(c->StartRound(Start(ids[0], 1)).ok());
  // Forged Report(ok) for both members: refused, and nothing commits.
  for (const std::string& id : ids) {
    v1::ReportRequest forged = Done(id, 1);
    forged.set_member_secret("");
    absl::Status s = c->Report(forged);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find(id), std::string::npos) << s;
    forged.set_member_secret(Secret(id == ids[0] ? ids[1] : ids[0]));
    EXPECT_EQ(c->Report(forged).code(), absl::StatusCode::kPermissionDenied);
  }
  v1::EngineStateRequest state;
  state.set_engine_id("A");
  EXPECT_EQ(c->GetEngineState(state).committed_version(), 0);
  // Leave, Heartbeat, Watch and re-Register of another's id: refused.
  v1::LeaveRequest leave;
  leave.set_member_id(ids[1]);
  EXPECT_EQ(c->Leave(leave).code(), absl::StatusCode::kPermissionDenied);
  v1::HeartbeatRequest hb;
  hb.set_member_id(ids[1]);
  EXPECT_EQ(c->Heartbeat(hb).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c->Watch(ids[1], "guess", &thief).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1, {"other"})).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(es.ended().has_value());  // the engine's stream is untouched
  // Without its stream (dropped, or its process died), another secret is
  // still refused, only retryably (the member may expire); an empty one too.
  c->Unwatch(ids[1], &es, "");
  for (const char* other : {"new-secret", ""}) {
    auto taken = c->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1), other);
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << other;
  }
  // The member itself re-attaches.
  ASSERT_TRUE(c->Register(Reg(v1::SIDE_ENGINE, "A", 0, 1), Secret(ids[1])).ok());
  ASSERT_TRUE(c->Watch(ids[1], Secret(ids[1]), &es).ok());
  EXPECT_EQ(c->GetStatus().members_size(), 2);
  // The members themselves commit the round.
  ASSERT_TRUE(c->Report(Done(ids[0], 1)).ok());
  ASSERT_TRUE(c->Report(Done(ids[1], 1)).ok());
  EXPECT_EQ(c->GetEngineState(state).committed_version(), 1);
  leave.set_member_secret(Secret(ids[1]));
  EXPECT_TRUE(c->Leave(leave).ok());
  EXPECT_EQ(c->GetStatus().members_size(), 1);
}

// A plan wait parked in the background: its answer and when it came.
class ParkedPlanWait {
 public:
  ParkedPlanWait(Coordinator& c, const std::string& id, absl::Duration wait) {
    v1::AwaitPlanRequest req;
    req.set_member_id(id);
    req.set_member_secret(Secret(id));
    c.AwaitPlan(req, In(wait), [this](absl::StatusOr<v1::AwaitPlanResponse> r) {
      absl::MutexLock l(&mu_);
      result_ = std::move(r);
      at_ = absl::Now();
    });
  }
  // Waits up to `wait` for the answer; DEADLINE_EXCEEDED "test: ..." if none.
  absl::StatusOr<v1::AwaitPlanResponse> Get(absl::Duration wait) {
    absl::MutexLock l(&mu_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return result_.has_value(); };
    mu_.AwaitWithTimeout(absl::Condition(&answered), wait);
    if (!result_.has_value()) return absl::DeadlineExceededError("test: no answer");
    return *result_;
  }
  bool Answered() {
    absl::MutexLock l(&mu_);
    return result_.has_value();
  }
  absl::Time at() {
    absl::MutexLock l(&mu_);
    return at_;
  }

 private:
  absl::Mutex mu_;
  std::optional<absl::StatusOr<v1::AwaitPlanResponse>> result_ ABSL_GUARDED_BY(mu_);
  absl::Time at_ ABSL_GUARDED_BY(mu_);
};

TEST(CoordinatorLimitsTest, PlanWaitersLearnAtOnceThatAMemberLeft) {
  auto c = Make();
  const std::string t0 = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 2));
  const std::string t1 = Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  // No engine yet: no plan, and the trainer's wait is parked.
  ParkedPlanWait wait(*c, t0, absl::Seconds(20));
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(wait.Answered());
  v1::LeaveRequest leave;
  leave.set_member_id(t1);
  leave.set_member_secret(Secret(t1));
  const absl::Time left = absl::Now();
  ASSERT_TRUE(c->Leave(leave).ok());
  auto p = wait.Get(absl::Seconds(5));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_NE(p.status().message().find("membership incomplete: trainer rank 1 left at"),
            std::string::npos)
      << p.status();
  EXPECT_LT(wait.at() - left, absl::Seconds(1));
  // A wait begun now waits for a member to join: the one that left comes
  // back, and the plan is answered.
  ParkedPlanWait again(*c, t0, absl::Seconds(20));
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(again.Answered());
  Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  EXPECT_TRUE(again.Get(absl::Seconds(5)).ok());
}

TEST(CoordinatorLimitsTest, AWaitParkedAfterTheDepartureWaitsForAMemberToJoin) {
  Coordinator::Options o = TestOptions();
  o.plan_settle = absl::Milliseconds(200);  // the departure is planned later
  o.plan_settle_max = absl::Milliseconds(400);
  auto c = Make(std::move(o));
  const std::string t0 = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 2));
  const std::string t1 = Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  v1::LeaveRequest leave;
  leave.set_member_id(t1);
  leave.set_member_secret(Secret(t1));
  ASSERT_TRUE(c->Leave(leave).ok());
  ParkedPlanWait wait(*c, t0, absl::Seconds(20));  // after the departure
  absl::SleepFor(absl::Milliseconds(700));  // the incomplete membership is planned
  EXPECT_FALSE(wait.Answered());
  Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  auto p = wait.Get(absl::Seconds(5));
  EXPECT_TRUE(p.ok()) << p.status();
}

TEST(CoordinatorLimitsTest, PlanWaitersLearnAtOnceThatAMemberExpired) {
  Coordinator::Options o = TestOptions();
  o.heartbeat_timeout = absl::Milliseconds(500);
  auto c = Make(std::move(o));
  const std::string t0 = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 2));
  const std::string t1 = Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  const std::string e = Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 2));
  ParkedPlanWait wait(*c, e, absl::Seconds(20));
  // Every member but trainer rank 1 heart-beats; it expires 500 ms after
  // it registered.
  const absl::Time start = absl::Now();
  while (!wait.Answered() && absl::Now() - start < absl::Seconds(10)) {
    for (const std::string& id : {t0, e}) {
      v1::HeartbeatRequest hb;
      hb.set_member_id(id);
      hb.set_member_secret(Secret(id));
      ASSERT_TRUE(c->Heartbeat(hb).ok());
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto p = wait.Get(absl::Seconds(1));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_NE(p.status().message().find(
                "membership incomplete: trainer rank 1 expired: stopped heart-beating"),
            std::string::npos)
      << p.status();
  EXPECT_LT(wait.at() - start, absl::Milliseconds(500) + absl::Seconds(1));
}

TEST(CoordinatorLimitsTest, ALaterPlanWaitSaysWhichMemberLeftAtItsDeadline) {
  auto c = Make();
  const std::string t0 = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 2));
  const std::string t1 = Register(*c, Reg(v1::SIDE_TRAINER, "", 1, 2));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(AwaitPlan(*c, t0).ok());
  v1::LeaveRequest leave;
  leave.set_member_id(t1);
  leave.set_member_secret(Secret(t1));
  ASSERT_TRUE(c->Leave(leave).ok());
  for (int i = 0; i < 200 && c->GetStatus().plan_error().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(c->GetStatus().plan_error().find("trainer rank 1 left"), std::string::npos);
  auto p = AwaitPlan(*c, t0, absl::Milliseconds(300));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDeadlineExceeded) << p.status();
  EXPECT_NE(p.status().message().find("membership incomplete: trainer rank 1 left at"),
            std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace refit
