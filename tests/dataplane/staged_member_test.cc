// Staged rounds through refitd and the host data plane (Gloo): the engine
// receives each round into staging, its live bytes untouched until every
// engine rank holds the round; an abort injected after the receive and
// before the apply leaves the live bytes of the previous version and the
// engine not torn, and the next round (dense, or a delta against that
// version) lands every byte.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

class StagedMemberTest : public ::testing::TestWithParam<bool> {};  // delta rounds

TEST_P(StagedMemberTest, AnAbortBeforeTheApplyLeavesTheLiveBytesOfThePreviousVersion) {
  absl::StatusOr<std::unique_ptr<RefitServer>> server = testing::StartHostRefitd(GetParam());
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama");
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  const absl::Status joined = testing::JoinHostMembers(
      nodes,
      [](size_t i) {
        DataPlaneOptions o;
        o.staging.enabled = i == 1;  // the engine
        return o;
      },
      deadline);
  ASSERT_TRUE(joined.ok()) << joined;
  Member& trainer = *nodes[0].member;
  Member& engine = *nodes[1].member;
  ASSERT_TRUE(trainer.Prepare(deadline).ok());
  ASSERT_TRUE(engine.Prepare(deadline).ok());

  // Round `version` with the trainer's pattern `pattern`, the trainer on
  // its own thread.
  absl::Status trainer_status;
  std::thread t;
  auto start = [&](int64_t version, int64_t pattern) {
    trainer_status = testing::FillMemberPattern(trainer, pattern);
    if (trainer_status.ok()) trainer_status = trainer.StartRound(version, deadline);
    t = std::thread([&, version] {
      if (!trainer_status.ok()) return;
      absl::StatusOr<int64_t> v = trainer.WaitForRound(deadline);
      trainer_status = !v.ok()            ? v.status()
                       : *v != version ? absl::InternalError(absl::StrCat("round ", *v))
                                       : trainer.RunRound(*v, deadline).status();
    });
  };

  // Round 1 commits: received, then applied; the pause is reported.
  start(1, 1);
  absl::StatusOr<int64_t> v = engine.WaitForRound(deadline);
  ASSERT_TRUE(v.ok()) << v.status();
  absl::StatusOr<RunStats> got = engine.ReceiveRound(1, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->bytes_received, 0);
  // Every engine rank holds it, and the live bytes are still untouched.
  EXPECT_FALSE(testing::CheckMemberPattern(engine, 1).ok());
  got = engine.ApplyRound(1, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->pause_seconds, 0);
  t.join();
  ASSERT_TRUE(trainer_status.ok()) << trainer_status;
  EXPECT_TRUE(testing::CheckMemberPattern(engine, 1).ok());

  // Round 2: every engine rank holds it in staging, then a trainer aborts
  // it before the engine applies.
  start(2, 2);
  v = engine.WaitForRound(deadline);
  ASSERT_TRUE(v.ok()) << v.status();
  got = engine.ReceiveRound(2, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(trainer.client().ReportFailed(2, "injected fault", deadline).ok());
  t.join();
  EXPECT_TRUE(absl::IsAborted(trainer_status)) << trainer_status;
  got = engine.ApplyRound(2, deadline);
  EXPECT_TRUE(absl::IsAborted(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("injected fault"), absl::string_view::npos)
      << got.status();
  absl::Status live = testing::CheckMemberPattern(engine, 1);
  EXPECT_TRUE(live.ok()) << live;
  auto state = trainer.client().GetEngineState("A", absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 1);
  EXPECT_EQ(state->torn, 0);

  // Round 3 carries version 1's bytes again: a delta round changes no
  // word, so it lands right only on staging that holds version 1 again.
  start(3, 1);
  v = engine.WaitForRound(deadline);
  ASSERT_TRUE(v.ok()) << v.status();
  got = engine.RunRound(3, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  t.join();
  ASSERT_TRUE(trainer_status.ok()) << trainer_status;
  live = testing::CheckMemberPattern(engine, 1);
  EXPECT_TRUE(live.ok()) << live;
  auto st = trainer.client().GetStatus(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_GE(st->rounds_size(), 3);
  const v1::RoundSummary& last = st->rounds(st->rounds_size() - 1);
  EXPECT_EQ(last.version(), 3);
  EXPECT_EQ(last.outcome(), "committed");
  EXPECT_GT(last.pause_seconds(), 0);
  EXPECT_EQ(last.pause_member(), engine.member_id());
  state = trainer.client().GetEngineState("A", absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 3);
}

// A delta round that changes 1/50 of the words lands every byte, and its
// apply writes only the changed words: a live byte changed behind refit's
// back survives a round that changes nothing.
TEST(StagedDeltaTest, TheApplyOfADeltaRoundWritesOnlyTheChangedWords) {
  absl::StatusOr<std::unique_ptr<RefitServer>> server = testing::StartHostRefitd(true);
  ASSERT_TRUE(server.ok()) << server.status();
  // Megatron's interleaved fused buffers land in vLLM's: some messages are
  // applied in place, others unpacked from the runner's staging.
  std::vector<testing::HostMember> nodes = testing::TrainerAndEngine(
      absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama");
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  ASSERT_TRUE(testing::JoinHostMembers(
                  nodes,
                  [](size_t i) {
                    DataPlaneOptions o;
                    o.staging.enabled = i == 1;
                    return o;
                  },
                  deadline)
                  .ok());
  Member& trainer = *nodes[0].member;
  Member& engine = *nodes[1].member;
  ASSERT_TRUE(trainer.Prepare(deadline).ok());
  ASSERT_TRUE(engine.Prepare(deadline).ok());
  auto round = [&](int64_t version, int64_t base, int64_t pattern) -> absl::Status {
    absl::Status ts = testing::FillMemberDelta(trainer, base, pattern, 50);
    if (ts.ok()) ts = trainer.StartRound(version, deadline);
    std::thread t([&] {
      absl::StatusOr<int64_t> v = ts.ok() ? trainer.WaitForRound(deadline) : ts;
      ts = v.ok() ? trainer.RunRound(*v, deadline).status() : v.status();
    });
    absl::StatusOr<int64_t> v = engine.WaitForRound(deadline);
    absl::Status es = v.ok() ? engine.RunRound(*v, deadline).status() : v.status();
    t.join();
    return !ts.ok() ? ts : es;
  };
  ASSERT_TRUE(round(1, 1, 1).ok());  // dense: every word
  ASSERT_TRUE(round(2, 1, 2).ok());  // 1/50 of the words change
  absl::Status live = testing::CheckMemberDelta(engine, 1, 2, 50);
  EXPECT_TRUE(live.ok()) << live;
  char& byte = nodes[1].memory.begin()->second[0];
  byte ^= 0x10;
  ASSERT_TRUE(round(3, 1, 2).ok());  // no word changes
  EXPECT_FALSE(testing::CheckMemberDelta(engine, 1, 2, 50).ok());
  byte ^= 0x10;
  live = testing::CheckMemberDelta(engine, 1, 2, 50);
  EXPECT_TRUE(live.ok()) << live;
}

INSTANTIATE_TEST_SUITE_P(DenseAndDelta, StagedMemberTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Delta" : "Dense";
                         });

}  // namespace
}  // namespace refit
