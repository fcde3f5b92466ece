// A round version started again after its abort, through RefitClient against
// refitd: every member sees it start once more, reports it, and its commit
// makes the engine that the aborted attempt tore whole.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace {

absl::Time In(absl::Duration d) { return absl::Now() + d; }

v1::Registration Reg(v1::Side side) {
  v1::Registration r;
  auto* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  if (side == v1::SIDE_ENGINE) id->set_engine_id("A");
  id->set_world_size(1);
  id->set_host_id("host0");
  id->set_device("cpu");
  auto* b = r.add_buffers();
  b->set_name("w");
  b->add_shape(4);
  b->set_dtype(3);  // F32
  b->set_byte_size(16);
  return r;
}

std::unique_ptr<RefitClient> Member(int port, v1::Side side) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.heartbeat_interval = absl::Milliseconds(200);
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  auto id = (*c)->Register(Reg(side));
  EXPECT_TRUE(id.ok()) << id.status();
  return std::move(*c);
}

TEST(RoundRetryTest, AVersionStartedAgainAfterItsAbortRunsAndMakesTheEngineWhole) {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  auto server = RefitServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto trainer = Member(port, v1::SIDE_TRAINER);
  auto engine = Member(port, v1::SIDE_ENGINE);
  ASSERT_NE(trainer, nullptr);
  ASSERT_NE(engine, nullptr);
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    auto plan = m->AwaitPlan(In(absl::Seconds(10)));
    ASSERT_TRUE(plan.ok()) << plan.status();
  }

  // Round 1 aborts: the engine fails its part.
  ASSERT_TRUE(trainer->StartRound(1, In(absl::Seconds(5))).ok());
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    auto v = m->WaitForRound(In(absl::Seconds(5)));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 1);
    EXPECT_EQ(m->RoundAttempt(1), 1);
  }
  ASSERT_TRUE(engine->ReportFailed(1, "copy failed", In(absl::Seconds(5))).ok());
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    EXPECT_EQ(m->AwaitOutcome(1, In(absl::Seconds(5))).code(), absl::StatusCode::kAborted);
  }
  auto state = trainer->GetEngineState("A", In(absl::Seconds(5)));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 0);
  EXPECT_EQ(state->torn, 1);

  // The trainer starts version 1 again: it runs as attempt 2 and commits.
  ASSERT_TRUE(trainer->StartRound(1, In(absl::Seconds(5))).ok());
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    auto v = m->WaitForRound(In(absl::Seconds(5)));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 1);
    EXPECT_EQ(m->RoundAttempt(1), 2);
  }
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    ASSERT_TRUE(m->ReportDone(1, {16, 0.01}, In(absl::Seconds(5))).ok());
  }
  for (RefitClient* m : {trainer.get(), engine.get()}) {
    absl::Status out = m->AwaitOutcome(1, In(absl::Seconds(5)));
    EXPECT_TRUE(out.ok()) << out;
  }
  state = trainer->GetEngineState("A", In(absl::Seconds(5)));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 1);
  EXPECT_EQ(state->torn, 0);

  // Committed: starting it again changes nothing; version 2 is next.
  ASSERT_TRUE(trainer->StartRound(1, In(absl::Seconds(5))).ok());
  EXPECT_EQ(engine->WaitForRound(In(absl::Milliseconds(300))).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(trainer->StartRound(2, In(absl::Seconds(5))).ok());
  auto v = engine->WaitForRound(In(absl::Seconds(5)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 2);
  EXPECT_EQ(engine->RoundAttempt(2), 1);
}

}  // namespace
}  // namespace refit
