// Coordinator without sockets: registration, plan hand-out to waiters,
// rounds (commit, abort, torn engines), heartbeat expiry, the key-value
// store, and planning beside housekeeping (a slow plan does not stall
// expiry and deadlines; a plan for a membership that changed meanwhile is
// not handed out).
#include "server/coordinator.h"
#include "testing/coordinator_testing.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace {

using namespace coordinator_testing;  // NOLINT: test helpers

TEST(CoordinatorTest, RequiresAPlanFunction) {
  Coordinator::Options o = TestOptions();
  o.plan_function = nullptr;
  EXPECT_EQ(Coordinator::Create(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorTest, RegistrationChecksAndRetries) {
  auto c = Make();
  v1::Registration old = Reg(v1::SIDE_TRAINER, "", 0, 1);
  old.set_protocol_version(0);
  EXPECT_EQ(c->Register(old).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::Registration bad = Reg(v1::SIDE_TRAINER, "", 1, 1);  // rank >= world
  EXPECT_EQ(c->Register(bad).status().code(), absl::StatusCode::kInvalidArgument);
  auto first = c->Register(Reg(v1::SIDE_TRAINER, "", 0, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->member_id(), "trainer/job/0");
  EXPECT_FALSE(first->already_registered());
  EXPECT_EQ(first->member_secret().size(), 32u);
  auto again = c->Register(Reg(v1::SIDE_TRAINER, "", 0, 1), first->member_secret());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_registered());
  v1::Registration other_job = Reg(v1::SIDE_ENGINE, "A", 0, 1);
  other_job.mutable_identity()->set_job("other");
  EXPECT_EQ(c->Register(other_job).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->GetStatus().members_size(), 1);
}

// A plan answer runs without the coordinator's lock: a parked wait's
// callback (answered when the last member joins) and one answered at once
// can both call back into the coordinator. A callback run under the lock
// would see its probe, which takes the lock on another thread, time out.
TEST(CoordinatorTest, PlanAnswersRunWithoutTheLock) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  // From inside an answer: does another thread get the lock within 2 s?
  auto lock_free = [&c] {
    auto got = std::make_shared<absl::Notification>();
    Coordinator* coordinator = c.get();
    std::thread probe([coordinator, got] {
      coordinator->MetricsState();
      got->Notify();
    });
    const bool ok = got->WaitForNotificationWithTimeout(absl::Seconds(2));
    // Under the lock, joining would never return: the probe finishes once
    // the caller lets the lock go, long before the coordinator is gone.
    if (ok) {
      probe.join();
    } else {
      probe.detach();
    }
    return ok;
  };
  v1::AwaitPlanRequest req;
  req.set_member_id(t);
  req.set_member_secret(Secret(t));
  absl::Notification parked_answered;
  std::atomic<bool> parked_free{false};
  const Coordinator::WaitId id =
      c->AwaitPlan(req, In(absl::Seconds(10)), [&](absl::StatusOr<v1::AwaitPlanResponse> r) {
        EXPECT_TRUE(r.ok()) << r.status();
        parked_free = lock_free();
        parked_answered.Notify();
      });
  EXPECT_NE(id, 0u);  // parked: no engine yet
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(parked_answered.WaitForNotificationWithTimeout(absl::Seconds(15)));
  EXPECT_TRUE(parked_free) << "the parked wait was answered under the lock";
  bool at_once_free = false;
  EXPECT_EQ(c->AwaitPlan(req, In(absl::Seconds(10)),
                         [&](absl::StatusOr<v1::AwaitPlanResponse> r) {
                           EXPECT_TRUE(r.ok()) << r.status();
                           at_once_free = lock_free();
                         }),
            0u);  // answered before AwaitPlan returned
  EXPECT_TRUE(at_once_free) << "the wait answered at once ran under the lock";
}

TEST(CoordinatorTest, HandsThePlanToWaitersOnceTheMembershipIsComplete) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  // The trainer waits before any engine is there.
  std::thread engine([&c] {
    absl::SleepFor(absl::Milliseconds(100));
    Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  });
  auto tp = AwaitPlan(*c, t);
  engine.join();
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_EQ(tp->bootstrap().global_rank(), 0);
  EXPECT_EQ(tp->bootstrap().global_world(), 2);
  EXPECT_EQ(tp->bootstrap().num_lanes(), 2);
  EXPECT_EQ(tp->bootstrap().engine_index(), -1);
  EXPECT_EQ(tp->bootstrap().kv_prefix(), absl::StrCat("refit/", tp->fingerprint(), "/"));
  EXPECT_FALSE(tp->slice().empty());
  auto ep = AwaitPlan(*c, "engine/job/A/0");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->bootstrap().global_rank(), 1);
  EXPECT_EQ(ep->bootstrap().engine_index(), 0);
  EXPECT_EQ(ep->epoch(), tp->epoch());
  EXPECT_EQ(c->GetStatus().plan_fingerprint(), tp->fingerprint());
  // A member that is not registered is told so.
  EXPECT_EQ(AwaitPlan(*c, "engine/job/Z/0").status().code(), absl::StatusCode::kNotFound);
}

TEST(CoordinatorTest, APlanErrorReachesEveryWaiter) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1, {"w"}));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1, {"nowhere"}));
  auto p = AwaitPlan(*c, t);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_NE(c->GetStatus().plan_error().find("nowhere"), std::string::npos);
}

TEST(CoordinatorTest, StartRoundNeedsEveryParticipantsStream) {
  FakeStream ts;
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  const std::string e = Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(AwaitPlan(*c, t).ok());
  ASSERT_TRUE(c->Watch(t, Secret(t), &ts).ok());
  EXPECT_EQ(c->StartRound(Start(t, 1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c->StartRound(Start(e, 1)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c->Watch("engine/job/Z/0", Secret("engine/job/Z/0"), &ts).code(), absl::StatusCode::kNotFound);
}

TEST(CoordinatorTest, RoundsCommitAbortAndLeaveTornEngines) {
  FakeStream ts, es;
  auto c = Make();
  const auto ids = ReadyForRounds(*c, ts, es);
  const std::string &t = ids[0], &e = ids[1];
  ASSERT_TRUE(c->StartRound(Start(t, 1)).ok());
  EXPECT_TRUE(c->StartRound(Start(t, 1))->already_started());
  EXPECT_EQ(es.WaitFor(v1::RoundEvent::ROUND_STARTED).version(), 1);
  EXPECT_TRUE(c->Report(Done(t, 1)).ok());
  EXPECT_TRUE(c->Report(Done(e, 1)).ok());
  EXPECT_EQ(ts.WaitFor(v1::RoundEvent::ROUND_COMMITTED).version(), 1);
  v1::EngineStateRequest cv;
  cv.set_engine_id("A");
  EXPECT_EQ(c->GetEngineState(cv).committed_version(), 1);

  ASSERT_TRUE(c->StartRound(Start(t, 2)).ok());
  EXPECT_TRUE(c->Report(Done(e, 2, /*ok=*/false)).ok());
  v1::RoundEvent aborted = ts.WaitFor(v1::RoundEvent::ROUND_ABORTED);
  EXPECT_EQ(aborted.version(), 2);
  EXPECT_NE(aborted.reason().find("copy failed"), std::string::npos);
  EXPECT_EQ(c->GetEngineState(cv).committed_version(), 1);
  EXPECT_EQ(c->GetEngineState(cv).torn_version(), 2);
  EXPECT_EQ(c->Report(Done(t, 2)).code(), absl::StatusCode::kAborted);  // late
  EXPECT_EQ(c->StartRound(Start(t, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  // Version 2 again after its abort: it runs again, as attempt 2, and its
  // commit makes the torn engine whole.
  auto again = c->StartRound(Start(t, 2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->already_started());
  EXPECT_EQ(again->attempt(), 2);
  EXPECT_EQ(c->StartRound(Start(t, 2))->attempt(), 2);  // a retry of it: no-op
  v1::ReportRequest stale = Done(e, 2);
  stale.set_attempt(1);  // a late report of the aborted attempt
  EXPECT_EQ(c->Report(stale).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(c->Report(Done(t, 2)).ok());
  EXPECT_EQ(c->GetEngineState(cv).committed_version(), 1);  // e has not reported
  v1::ReportRequest current = Done(e, 2);
  current.set_attempt(2);
  EXPECT_TRUE(c->Report(current).ok());
  EXPECT_EQ(c->GetEngineState(cv).committed_version(), 2);
  EXPECT_EQ(c->GetEngineState(cv).torn_version(), 0);
  EXPECT_TRUE(c->StartRound(Start(t, 2))->already_started());  // committed: no-op

  ASSERT_TRUE(c->StartRound(Start(t, 3)).ok());
  EXPECT_TRUE(c->Report(Done(t, 3)).ok());
  EXPECT_TRUE(c->Report(Done(e, 3)).ok());
  EXPECT_EQ(c->GetEngineState(cv).committed_version(), 3);
  EXPECT_EQ(c->GetEngineState(cv).torn_version(), 0);
  v1::StatusResponse st = c->GetStatus();
  ASSERT_EQ(st.rounds_size(), 4);
  EXPECT_EQ(st.rounds(1).outcome(), "aborted");
  EXPECT_EQ(st.rounds(2).outcome(), "committed");
  EXPECT_EQ(st.rounds(2).version(), 2);
  EXPECT_EQ(st.rounds(2).attempt(), 2);
  ASSERT_EQ(st.engines_size(), 1);
  EXPECT_EQ(st.engines(0).committed_version(), 3);
}

TEST(CoordinatorTest, ARoundTimesOut) {
  FakeStream ts, es;
  Coordinator::Options o = TestOptions();
  o.round_timeout = absl::Milliseconds(100);
  auto c = Make(std::move(o));
  const auto ids = ReadyForRounds(*c, ts, es);
  ASSERT_TRUE(c->StartRound(Start(ids[0], 1)).ok());
  v1::RoundEvent e = es.WaitFor(v1::RoundEvent::ROUND_ABORTED);
  EXPECT_EQ(e.version(), 1);
  EXPECT_NE(e.reason().find("timed out"), std::string::npos) << e.reason();
}

TEST(CoordinatorTest, ASilentMemberExpiresAndItsRoundAborts) {
  FakeStream ts, es;
  Coordinator::Options o = TestOptions();
  o.heartbeat_timeout = absl::Milliseconds(500);
  auto c = Make(std::move(o));
  const auto ids = ReadyForRounds(*c, ts, es);
  ASSERT_TRUE(c->StartRound(Start(ids[0], 1)).ok());
  // The trainer keeps heart-beating; the engine does not.
  const absl::Time start = absl::Now();
  v1::HeartbeatRequest hb;
  hb.set_member_id(ids[0]);
  hb.set_member_secret(Secret(ids[0]));
  while (!es.ended().has_value() && absl::Now() - start < absl::Seconds(5)) {
    auto r = c->Heartbeat(hb);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(es.ended().has_value());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500) + absl::Seconds(2));
  EXPECT_EQ(es.ended()->code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ts.WaitFor(v1::RoundEvent::ROUND_ABORTED).reason().find("heart-beating"),
            std::string::npos);
  hb.set_member_id(ids[1]);
  EXPECT_EQ(c->Heartbeat(hb).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->GetStatus().members_size(), 1);
}

// Calls KvGet as member `reader` (with its secret) and returns its answer
// (waits up to 5 s for it).
absl::StatusOr<std::string> KvGet(Coordinator& c, const std::string& reader,
                                  const std::string& key, bool wait, absl::Duration deadline) {
  v1::KvGetRequest req;
  req.set_key(key);
  req.set_wait(wait);
  req.set_member_id(reader);
  req.set_member_secret(Secret(reader));
  absl::Notification n;
  absl::StatusOr<std::string> out = absl::InternalError("test: no answer");
  c.KvGet(req, In(deadline), [&](absl::StatusOr<std::string> r) {
    out = std::move(r);
    n.Notify();
  });
  n.WaitForNotificationWithTimeout(deadline + absl::Seconds(5));
  return out;
}

TEST(CoordinatorTest, KeyValueStoreAnswersAtOnceOnSetOrAtTheDeadline) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  EXPECT_EQ(KvGet(*c, t, "k", false, absl::Seconds(1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(KvGet(*c, t, "k", true, absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  v1::KvSetRequest set;
  EXPECT_EQ(c->KvSet(set).code(), absl::StatusCode::kInvalidArgument);
  std::thread setter([&c, t] {
    absl::SleepFor(absl::Milliseconds(50));
    v1::KvSetRequest s;
    s.set_member_id(t);
    s.set_member_secret(Secret(t));
    s.set_key("k");
    s.set_value("v");
    EXPECT_TRUE(c->KvSet(s).ok());
  });
  auto got = KvGet(*c, t, "k", true, absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  // A cancelled wait ends CANCELLED.
  v1::KvGetRequest req;
  req.set_key("never");
  req.set_wait(true);
  req.set_member_id(t);
  req.set_member_secret(Secret(t));
  absl::Status status;
  Coordinator::WaitId id = c->KvGet(req, In(absl::Seconds(30)),
                                    [&](absl::StatusOr<std::string> r) { status = r.status(); });
  ASSERT_NE(id, 0u);
  c->CancelWait(id);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST(CoordinatorTest, OnlyTheMemberItselfReadsItsPlanAndOnlyMembersReadKeys) {
  auto c = Make();
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(AwaitPlan(*c, t).ok());
  const std::string secret = Secret(t);
  for (const std::string& forged : {std::string(""), std::string("guess")}) {
    Secret(t) = forged;
    absl::StatusOr<v1::AwaitPlanResponse> p = AwaitPlan(*c, t);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << forged;
    EXPECT_EQ(KvGet(*c, t, "k", false, absl::Seconds(1)).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  Secret(t) = secret;
  absl::StatusOr<std::string> outsider = KvGet(*c, "nobody", "k", false, absl::Seconds(1));
  EXPECT_EQ(outsider.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(outsider.status().message().find("not a registered member"), std::string::npos);
}

TEST(CoordinatorTest, StopEndsWaitsAndStreams) {
  FakeStream ts, es;
  auto c = Make();
  const std::vector<std::string> ids = ReadyForRounds(*c, ts, es);
  v1::KvGetRequest req;
  req.set_key("never");
  req.set_wait(true);
  req.set_member_id(ids[0]);
  req.set_member_secret(Secret(ids[0]));
  absl::Status status;
  c->KvGet(req, In(absl::Seconds(30)), [&](absl::StatusOr<std::string> r) { status = r.status(); });
  c->Stop();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ts.ended()->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(AwaitPlan(*c, "trainer/job/0").status().code(), absl::StatusCode::kUnavailable);
}

// A plan function that blocks (at most 10 s) until released, numbering its
// plans "plan-1", "plan-2", ... and recording how many engine members each
// had.
struct BlockingPlanner {
  absl::Notification entered;   // the first call has started
  absl::Notification released;  // let the first call finish
  std::atomic<int> calls{0};
  absl::Mutex mu;
  std::vector<size_t> engines ABSL_GUARDED_BY(mu);

  PlanFunction Function() {
    return [this](const std::vector<v1::Registration>& t,
                  const std::vector<v1::Registration>& e) -> absl::StatusOr<BuiltPlan> {
      const int n = ++calls;
      if (n == 1) {
        entered.Notify();
        released.WaitForNotificationWithTimeout(absl::Seconds(10));
      }
      {
        absl::MutexLock l(&mu);
        engines.push_back(e.size());
      }
      absl::StatusOr<BuiltPlan> p = NameMatchingPlan(t, e);
      if (p.ok()) p->fingerprint = absl::StrCat("plan-", n);
      return p;
    };
  }
};

TEST(CoordinatorTest, HousekeepingGoesOnWhileAPlanIsBuilt) {
  BlockingPlanner planner;
  Coordinator::Options o = TestOptions();
  o.plan_function = planner.Function();
  o.heartbeat_timeout = absl::Milliseconds(500);
  auto c = Make(std::move(o));
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  const std::string a = Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  const std::string b = Register(*c, Reg(v1::SIDE_ENGINE, "B", 0, 1));
  std::atomic<bool> beating{true};
  std::thread heart([&] {  // t and a beat; b falls silent
    v1::HeartbeatRequest hb;
    while (beating) {
      for (const std::string& id : {t, a}) {
        hb.set_member_id(id);
        hb.set_member_secret(Secret(id));
        (void)c->Heartbeat(hb);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  ASSERT_TRUE(planner.entered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  const absl::Time blocked = absl::Now();
  // While the plan function is blocked: a KV wait meets its deadline...
  EXPECT_EQ(KvGet(*c, t, "k", true, absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // ...and the silent member expires within the heartbeat timeout + slack.
  while (c->GetStatus().members_size() == 3 && absl::Now() - blocked < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(c->GetStatus().members_size(), 2);
  EXPECT_LT(absl::Now() - blocked, absl::Milliseconds(500) + absl::Seconds(2));
  EXPECT_FALSE(planner.released.HasBeenNotified());
  EXPECT_EQ(planner.calls.load(), 1);
  planner.released.Notify();
  // The plan for {t, a, b} is stale: the members get the plan for {t, a}.
  auto p = AwaitPlan(*c, t);
  beating = false;
  heart.join();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->fingerprint(), "plan-2");
  EXPECT_EQ(p->bootstrap().global_world(), 2);
  absl::MutexLock l(&planner.mu);
  EXPECT_EQ(planner.engines, (std::vector<size_t>{2, 1}));
}

TEST(CoordinatorTest, APlanForAnOlderMembershipIsNotHandedOut) {
  BlockingPlanner planner;
  Coordinator::Options o = TestOptions();
  o.plan_function = planner.Function();
  auto c = Make(std::move(o));
  const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  ASSERT_TRUE(planner.entered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  // The membership changes while plan-1 is being built.
  Register(*c, Reg(v1::SIDE_ENGINE, "B", 0, 1));
  const int64_t epoch = c->GetStatus().epoch();  // the plan's epoch: none yet
  planner.released.Notify();
  auto p = AwaitPlan(*c, t);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->fingerprint(), "plan-2");
  EXPECT_EQ(p->bootstrap().global_world(), 3);
  EXPECT_GT(p->epoch(), epoch);
  EXPECT_EQ(c->GetStatus().plan_fingerprint(), "plan-2");
  EXPECT_EQ(planner.calls.load(), 2);
}

}  // namespace
}  // namespace refit
