// A small round through refitd and the data plane (Gloo, host buffers)
// takes milliseconds from the trainer's RunRound to every member seeing the
// commit: nothing in the path waits out a polling interval (a member's
// outcome watcher once held every round for 100 ms after its bytes moved).
#include <algorithm>
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

TEST(RoundLatencyMemberTest, ASmallRoundCommitsInMilliseconds) {
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
  constexpr int kRounds = 7;
  std::vector<double> trainer_ms, engine_ms;
  absl::Status trainer, engine;
  std::thread t([&] {
    Member& m = *nodes[0].member;
    absl::Status s = m.Prepare(deadline);
    for (int v = 1; v <= kRounds && s.ok(); ++v) {
      s = testing::FillMemberPattern(m, v);
      if (s.ok()) s = m.StartRound(v, deadline);
      absl::StatusOr<int64_t> got = s.ok() ? m.WaitForRound(deadline) : s;
      const absl::Time t0 = absl::Now();
      s = got.ok() ? m.RunRound(*got, deadline).status() : got.status();
      trainer_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    }
    trainer = s;
  });
  std::thread e([&] {
    Member& m = *nodes[1].member;
    absl::Status s = m.Prepare(deadline);
    for (int v = 1; v <= kRounds && s.ok(); ++v) {
      absl::StatusOr<int64_t> got = m.WaitForRound(deadline);
      const absl::Time t0 = absl::Now();
      s = got.ok() ? m.RunRound(*got, deadline).status() : got.status();
      engine_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (s.ok()) s = testing::CheckMemberPattern(m, v);
    }
    engine = s;
  });
  t.join();
  e.join();
  ASSERT_TRUE(trainer.ok()) << trainer;
  ASSERT_TRUE(engine.ok()) << engine;
  // Rounds 2.. (the first connects the transport). The median, so that one
  // round slowed by a loaded machine does not decide.
  auto median = [](std::vector<double> v) {
    v.erase(v.begin());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  EXPECT_LT(median(trainer_ms), 50.0) << "trainer's RunRound, median ms";
  EXPECT_LT(median(engine_ms), 50.0) << "engine's RunRound, median ms";
}

}  // namespace
}  // namespace refit
