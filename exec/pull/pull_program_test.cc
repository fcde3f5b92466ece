// PullProgram on every data-plane test pattern: each destination rank's
// program, built from its own slice, with the source buffers resolved
// through the senders' slices (PairSourceBuffers), reproduces every byte.
#include "exec/pull/pull_program.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "plan/plan_codec.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

using testing::AllocateRankBuffers;
using testing::CheckRecords;
using testing::FillRecords;
using testing::MakePatternPlan;
using testing::Pointers;

constexpr char kFill = static_cast<char>(0xEE);
constexpr uint64_t kStep = 7;

// Runs every destination rank's pull program from its slice; senders
// for which `include` is false are skipped. Returns CheckRecords' verdict
// per destination rank ("" = every byte right).
std::vector<std::string> PullAll(const Plan& plan,
                                 const std::function<bool(int32_t)>& include) {
  // Source memory, by (rank, buffer name), filled with the pattern.
  std::vector<std::vector<std::vector<char>>> src(plan.src.world_size);
  std::vector<std::map<std::string, char*>> src_by_name(plan.src.world_size);
  for (int32_t s = 0; s < plan.src.world_size; ++s) {
    src[s] = AllocateRankBuffers(plan.src, s, 0);
    FillRecords(plan.src, s, kStep, &src[s]);
    for (size_t b = 0; b < plan.src.buffers.size(); ++b) {
      if (plan.src.buffers[b].rank == s) {
        src_by_name[s][plan.src.buffers[b].name] = src[s][b].data();
      }
    }
  }
  std::vector<std::string> out;
  for (int32_t d = 0; d < plan.dst.world_size; ++d) {
    const Plan slice = ExtractSlice(plan, Side::kEngine, d);
    absl::StatusOr<PullProgram> p = BuildPullProgram(slice, d, include);
    if (!p.ok()) {
      out.push_back(std::string(p.status().message()));
      continue;
    }
    std::vector<char*> sp(slice.src.buffers.size(), nullptr);
    for (const PullPeer& peer : p->peers) {
      const Plan ss = ExtractSlice(plan, Side::kTrainer, peer.src_rank);
      const std::vector<int32_t> order = PairSourceBuffers(ss, peer.src_rank, d);
      EXPECT_EQ(order.size(), peer.buffers.size());
      for (size_t k = 0; k < order.size() && k < peer.buffers.size(); ++k) {
        sp[peer.buffers[k]] =
            src_by_name[peer.src_rank].at(ss.src.buffers[order[k]].name);
      }
    }
    std::vector<std::vector<char>> dst = AllocateRankBuffers(plan.dst, d, kFill);
    std::vector<char*> dp(slice.dst.buffers.size(), nullptr);
    for (size_t b = 0; b < slice.dst.buffers.size(); ++b) {
      for (size_t f = 0; f < plan.dst.buffers.size(); ++f) {
        if (plan.dst.buffers[f].rank == d &&
            plan.dst.buffers[f].name == slice.dst.buffers[b].name) {
          dp[b] = dst[f].data();
        }
      }
    }
    absl::StatusOr<std::vector<ResolvedCopy>> rc =
        ResolveTasks(p->tasks, sp, dp, nullptr, nullptr);
    if (!rc.ok()) {
      out.push_back(std::string(rc.status().message()));
      continue;
    }
    RunCopiesHost(*rc);
    out.push_back(CheckRecords(plan.dst, d, kStep, kFill, dst));
  }
  return out;
}

TEST(PullProgramTest, EveryPatternPullsEveryByteFromSlices) {
  for (const std::string& name : testing::PatternNames()) {
    // Relays run on the executor alone: refitd plans a membership that
    // pulls without them.
    if (name == "relay") continue;
    SCOPED_TRACE(name);
    absl::StatusOr<Plan> plan = MakePatternPlan(name);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const std::string& r : PullAll(*plan, {})) EXPECT_EQ(r, "");
  }
}

TEST(PullProgramTest, ProgramBytesAreTheReceivedBytes) {
  absl::StatusOr<Plan> plan = MakePatternPlan("experts");
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (int32_t d = 0; d < plan->dst.world_size; ++d) {
    int64_t want = 0;
    for (const Message& m : plan->messages) {
      if (m.dst_rank == d) want += m.bytes;
    }
    absl::StatusOr<PullProgram> p = BuildPullProgram(*plan, d);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->bytes, want);
  }
}

TEST(PullProgramTest, ExcludedSendersAreLeftOut) {
  absl::StatusOr<Plan> plan = MakePatternPlan("3to1");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto only0 = [](int32_t s) { return s == 0; };
  absl::StatusOr<PullProgram> p = BuildPullProgram(*plan, 0, only0);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->peers.size(), 1u);
  EXPECT_EQ(p->peers[0].src_rank, 0);
  // Rank 0's part is there, the others' bytes are not.
  const std::vector<std::string> r = PullAll(*plan, only0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0], "");
  EXPECT_EQ(PullReceivers(*plan, 1, [](int32_t) { return false; }).size(), 0u);
  EXPECT_EQ(PullReceivers(*plan, 1), std::vector<int32_t>{0});
}

TEST(PullProgramTest, SameHostFollowsHostOfRankAndAssumesOneHostWhenUnknown) {
  absl::StatusOr<Plan> plan = MakePatternPlan("2to2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(SameHost(*plan, 0, 3));
  plan->src.host_of_rank = {0, 1};
  plan->dst.host_of_rank = {1, 0};
  EXPECT_FALSE(SameHost(*plan, 0, 1));
  EXPECT_TRUE(SameHost(*plan, 0, 3));
  EXPECT_TRUE(SameHost(*plan, 1, 2));
  EXPECT_FALSE(SameHost(*plan, 1, 3));
}

}  // namespace
}  // namespace refit
