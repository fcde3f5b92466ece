// A member that calls Prepare() again on an unchanged plan (one side only)
// against a refitd child process: the next round still commits and moves
// every byte (host buffers over Gloo, checked), instead of aborting with
// "Connection closed by peer" because that member alone rebuilt its
// connections.
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

TEST(ReprepareTest, OneSidePreparingAgainOnAnUnchangedPlanKeepsRoundsCommitting) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {"--plan_settle_ms=5"},
                         absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out"),
                         absl::Seconds(20))
                  .ok());
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", refitd.port()), "tiny-llama");  // trainer, engine A
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE(
      testing::JoinHostMembers(nodes, [](size_t) { return DataPlaneOptions(); }, deadline).ok());
  // Round v: member `again` (0 trainer, 1 engine, -1 none) prepares again
  // first; every member runs the round; the engine's bytes are checked.
  auto round = [&](int64_t v, int again) {
    absl::Status trainer, engine;
    std::thread t([&] {
      Member& m = *nodes[0].member;
      absl::Status s = v == 1 || again == 0 ? m.Prepare(deadline) : absl::OkStatus();
      if (s.ok()) s = testing::FillMemberPattern(m, v);
      if (s.ok()) s = m.StartRound(v, deadline);
      absl::StatusOr<int64_t> got = s.ok() ? m.WaitForRound(deadline) : s;
      trainer = got.ok() ? m.RunRound(*got, deadline).status() : got.status();
    });
    std::thread e([&] {
      Member& m = *nodes[1].member;
      absl::Status s = v == 1 || again == 1 ? m.Prepare(deadline) : absl::OkStatus();
      absl::StatusOr<int64_t> got = s.ok() ? m.WaitForRound(deadline) : s;
      s = got.ok() ? m.RunRound(*got, deadline).status() : got.status();
      engine = s.ok() ? testing::CheckMemberPattern(m, v) : s;
    });
    t.join();
    e.join();
    EXPECT_TRUE(trainer.ok()) << "round " << v << ": " << trainer;
    EXPECT_TRUE(engine.ok()) << "round " << v << ": " << engine;
  };
  round(1, -1);
  round(2, /*engine prepares again*/ 1);
  round(3, /*trainer prepares again*/ 0);
  round(4, -1);
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit
