// A round version run again after its abort, through the data plane (Gloo,
// host buffers) against refitd: the trainer fails round 1 after the engine
// connected, then starts version 1 again; the second attempt bootstraps
// under keys of its own (not the aborted attempt's) and moves every byte
// (checked); the engine, torn by the aborted attempt, holds version 1.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

TEST(RoundRetryMemberTest, AVersionRunAgainAfterItsAbortMovesEveryByte) {
  RefitServer::Options so;
  so.coordinator.plan_function = DefaultPlanFunction({});
  absl::StatusOr<std::unique_ptr<RefitServer>> server = RefitServer::Start(std::move(so));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama");  // trainer, engine A
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const absl::Status joined = testing::JoinHostMembers(
      nodes, [](size_t) { return DataPlaneOptions(); }, deadline);
  ASSERT_TRUE(joined.ok()) << joined;
  absl::Status engine_first, trainer, engine;
  std::thread t([&] {
    Member& m = *nodes[0].member;
    absl::Status s = m.Prepare(deadline);
    if (s.ok()) s = testing::FillMemberPattern(m, 1);
    if (s.ok()) s = m.StartRound(1, deadline);
    absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
    // Attempt 1: the engine has connected (its bootstrap keys are set);
    // the trainer fails it.
    absl::SleepFor(absl::Milliseconds(500));
    if (v.ok()) s = m.client().ReportFailed(*v, "injected fault", deadline);
    if (s.ok()) s = m.StartRound(1, deadline);  // run version 1 again
    v = s.ok() ? m.WaitForRound(deadline) : s;
    if (v.ok() && *v != 1) v = absl::InternalError(absl::StrCat("round ", *v, " announced"));
    trainer = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
  });
  std::thread e([&] {
    Member& m = *nodes[1].member;
    absl::Status s = m.Prepare(deadline);
    absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
    engine_first = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
    v = m.WaitForRound(deadline);  // attempt 2
    s = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
    if (s.ok()) s = testing::CheckMemberPattern(m, 1);
    engine = s;
  });
  t.join();
  e.join();
  EXPECT_EQ(engine_first.code(), absl::StatusCode::kAborted) << engine_first;
  EXPECT_NE(engine_first.message().find("injected fault"), absl::string_view::npos)
      << engine_first;
  EXPECT_TRUE(trainer.ok()) << trainer;
  EXPECT_TRUE(engine.ok()) << engine;
  auto state = nodes[0].member->client().GetEngineState("A", absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 1);
  EXPECT_EQ(state->torn, 0);
}

}  // namespace
}  // namespace refit
