// Delta and verified rounds through refitd (--delta) and the client
// library, over Gloo on host buffers: an unchanged version moves only
// headers, every byte is checked after every round, a byte flipped in the
// engine between rounds fails the next commit naming the engine rank and
// tensor, and the retry (dense for the torn engine) repairs it; refitd's
// status shows the engine's last verified version. A trainer of two ranks
// and two engines (TP2; TP1 x DP2), each rank running its own slice, land
// every byte of dense and delta rounds.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

// A tiny-llama trainer and engine on host memory joined to `server` with
// the default data plane by `deadline`; empty, with a test failure, when
// they could not join.
std::vector<testing::HostMember> JoinTrainerAndEngine(const RefitServer& server,
                                                      absl::Time deadline) {
  std::vector<testing::HostMember> nodes =
      testing::TrainerAndEngine(absl::StrCat("127.0.0.1:", server.port()), "tiny-llama");
  const absl::Status joined =
      testing::JoinHostMembers(nodes, [](size_t) { return DataPlaneOptions(); }, deadline);
  EXPECT_TRUE(joined.ok()) << joined;
  if (!joined.ok()) nodes.clear();
  return nodes;
}

TEST(DeltaMemberTest, DeltaRoundsLandEveryByteAndCatchAFlippedByte) {
  absl::StatusOr<std::unique_ptr<RefitServer>> server = testing::StartHostRefitd(true);
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  std::vector<testing::HostMember> nodes = JoinTrainerAndEngine(**server, deadline);
  ASSERT_FALSE(nodes.empty());
  // Rounds (version, trainer pattern): 1 and 2 change every element, 3
  // changes none, 4 runs after the engine's byte was flipped and aborts,
  // 4 again repairs it.
  const std::vector<std::pair<int64_t, int64_t>> rounds = {{1, 1}, {2, 2}, {3, 2}, {4, 2}, {4, 2}};
  std::vector<absl::Status> trainer(rounds.size()), engine(rounds.size());
  std::vector<int64_t> engine_bytes(rounds.size(), 0);
  std::thread t([&] {
    Member& m = *nodes[0].member;
    absl::Status s = m.Prepare(deadline);
    for (size_t i = 0; i < rounds.size() && s.ok(); ++i) {
      s = testing::FillMemberPattern(m, rounds[i].second);
      if (s.ok()) s = m.StartRound(rounds[i].first, deadline);
      absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
      trainer[i] = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
      s = i == 3 ? absl::OkStatus() : trainer[i];
    }
  });
  std::thread e([&] {
    Member& m = *nodes[1].member;
    absl::Status s = m.Prepare(deadline);
    for (size_t i = 0; i < rounds.size() && s.ok(); ++i) {
      absl::StatusOr<int64_t> v = m.WaitForRound(deadline);
      absl::StatusOr<RunStats> r = v.ok() ? m.RunRound(*v, deadline) : v.status();
      engine[i] = r.status();
      if (r.ok()) {
        engine_bytes[i] = r->bytes_received;
        engine[i] = testing::CheckMemberPattern(m, rounds[i].second);
      }
      if (i == 2) nodes[1].memory.begin()->second[0] ^= 0x10;  // between rounds 3 and 4
      s = i == 3 ? absl::OkStatus() : engine[i];
    }
  });
  t.join();
  e.join();
  for (size_t i : {0, 1, 2, 4}) {
    EXPECT_TRUE(trainer[i].ok()) << "round " << i << ": " << trainer[i];
    EXPECT_TRUE(engine[i].ok()) << "round " << i << ": " << engine[i];
  }
  // Version 3 changed nothing: headers only.
  EXPECT_GT(engine_bytes[1], 0);
  EXPECT_LT(engine_bytes[2] * 20, engine_bytes[1]) << engine_bytes[2];
  EXPECT_TRUE(absl::IsAborted(engine[3])) << engine[3];
  EXPECT_TRUE(absl::StrContains(engine[3].message(), "verify: engine rank 0 tensor "))
      << engine[3];
  auto st = nodes[0].member->client().GetStatus(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->engines_size(), 1);
  EXPECT_EQ(st->engines(0).verified_version(), 4);
}

// At Gloo's speeds the host delta codec loses to the links: refitd --delta
// runs the rounds dense (no bases, the dense bytes) and says why in the
// round's summary.
TEST(DeltaMemberTest, AtGlooSpeedsDeltaRoundsRunDenseAndSayWhy) {
  absl::StatusOr<std::unique_ptr<RefitServer>> server =
      testing::StartHostRefitd(true, {}, /*host_link_gbps=*/0);
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  std::vector<testing::HostMember> nodes = JoinTrainerAndEngine(**server, deadline);
  ASSERT_FALSE(nodes.empty());
  // Version 2 changes nothing: a delta round would move headers only.
  std::vector<int64_t> engine_bytes(2, 0);
  std::vector<std::vector<int64_t>> bases(2);
  absl::Status trainer, engine;
  std::thread t([&] {
    Member& m = *nodes[0].member;
    trainer = m.Prepare(deadline);
    for (int64_t v = 1; v <= 2 && trainer.ok(); ++v) {
      trainer = testing::FillMemberPattern(m, 1);
      if (trainer.ok()) trainer = m.StartRound(v, deadline);
      absl::StatusOr<int64_t> got = trainer.ok() ? m.WaitForRound(deadline) : trainer;
      trainer = got.ok() ? m.RunRound(*got, deadline).status() : got.status();
    }
  });
  std::thread e([&] {
    Member& m = *nodes[1].member;
    engine = m.Prepare(deadline);
    for (int i = 0; i < 2 && engine.ok(); ++i) {
      absl::StatusOr<int64_t> v = m.WaitForRound(deadline);
      absl::StatusOr<RunStats> r = v.ok() ? m.RunRound(*v, deadline) : v.status();
      engine = r.status();
      if (!r.ok()) break;
      engine_bytes[i] = r->bytes_received;
      bases[i] = m.client().RoundModeOf(*v).delta_base;
      engine = testing::CheckMemberPattern(m, 1);
    }
  });
  t.join();
  e.join();
  ASSERT_TRUE(trainer.ok()) << trainer;
  ASSERT_TRUE(engine.ok()) << engine;
  EXPECT_GT(engine_bytes[0], 0);
  EXPECT_EQ(engine_bytes[1], engine_bytes[0]);  // dense again
  EXPECT_TRUE(bases[1].empty());
  auto st = nodes[0].member->client().GetStatus(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_GE(st->rounds_size(), 2);
  const std::string note = st->rounds(st->rounds_size() - 1).delta_note();
  EXPECT_TRUE(absl::StartsWith(note, "delta rounds run dense: the host delta codec")) << note;
}

// Every rank of a trainer (TP2) and of two engines (TP2; TP1 x DP2) runs
// its own slice of the plan, whose small staging budget and waves make
// several delta batches a lane, each of several plan waves, a rank's
// slice holding a different part of each: every rank must cut them alike. Round 1
// is dense, rounds 2 and 3 change 1/50 of the words: every round commits
// with every engine byte in place, and the delta rounds move a fraction of
// the dense round's bytes.
TEST(DeltaMemberTest, RanksRunningTheirSlicesLandEveryByte) {
  PlannerOptions planner;
  planner.staging_budget_bytes = 16 << 10;
  planner.max_wave_bytes = 1 << 10;  // several plan waves a batch
  // Messages of at most half the lane share: room beside a packed one for
  // its encoding within the budget (docs/delta.md: the staging budget).
  planner.max_message_bytes = 4 << 10;
  absl::StatusOr<std::unique_ptr<RefitServer>> server = testing::StartHostRefitd(true, planner);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::vector<testing::HostMember>> nodes =
      testing::HostJob(absl::StrCat("127.0.0.1:", (*server)->port()), "tiny-llama",
                       "megatron:tp=2", {"vllm:tp=2", "vllm:tp=1,dp=2"});
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 6u);
  const absl::Time deadline = absl::Now() + absl::Seconds(45);
  ASSERT_TRUE(testing::JoinHostMembers(*nodes, [](size_t) { return DataPlaneOptions(); },
                                       deadline)
                  .ok());
  constexpr int64_t kEvery = 50;
  testing::HostRounds rounds = testing::RunHostRounds(
      *nodes, 3,
      [](const Member& m, int64_t v) {
        return testing::FillMemberDelta(m, 1, v, v > 1 ? kEvery : 0);
      },
      [](const Member& m, int64_t v) {
        return testing::CheckMemberDelta(m, 1, v, v > 1 ? kEvery : 0);
      },
      deadline);
  ASSERT_TRUE(rounds.FirstFailure().ok()) << rounds.FirstFailure();
  for (size_t i = 2; i < nodes->size(); ++i) {  // the engine ranks
    const int64_t dense = rounds.stats[0][i].bytes_received;
    EXPECT_GT(dense, 0) << "member " << i;
    EXPECT_GT(rounds.stats[1][i].waves, 2) << "member " << i;  // plan waves
    for (int v : {1, 2}) {
      EXPECT_LT(rounds.stats[v][i].bytes_received * 5, dense) << "member " << i << " round "
                                                              << v + 1;
    }
  }
}

}  // namespace
}  // namespace refit
