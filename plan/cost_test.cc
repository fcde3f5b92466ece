// The planner's placed replica choice: the time model (cost.h) recomputed
// from the plan's messages equals plan.stats' prediction, the lower bound
// never exceeds it, a replica on the destination's GPU is chosen whenever
// there is one, and one on its host when it is free.
#include "plan/cost.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"

namespace refit {
namespace {

// Seconds of the slowest rank, from the messages at the planned speeds;
// *by_class: all bytes per link class.
double PredictFromMessages(const Plan& plan, LinkBytes* by_class) {
  return PredictedSeconds(plan, plan.options.links, by_class);
}

// [rows, 64] f32 tensors, replicated over dp and sharded over tp on the
// source, sharded over the engine's tp (and replicated over its dp).
void Sides(std::mt19937_64& rng, SideLayout* src, SideLayout* dst) {
  const int64_t sdp = 1 + rng() % 4, stp = 1 + rng() % 2;
  const int64_t dtp = 1 + rng() % 4, ddp = 1 + rng() % 3;
  const Mesh smesh = *Mesh::Make({"dp", "tp"}, {sdp, stp});
  const Mesh dmesh = *Mesh::Make({"dp", "tp"}, {ddp, dtp});
  src->world_size = static_cast<int32_t>(sdp * stp);
  dst->world_size = static_cast<int32_t>(ddp * dtp);
  const int n = 1 + rng() % 4;
  for (int i = 0; i < n; ++i) {
    TensorSpec t{absl::StrCat("t", i), {8 * (1 + static_cast<int64_t>(rng() % 16)), 64},
                 DType::kF32};
    ASSERT_TRUE(AddTensor(*src, t).ok());
    ASSERT_TRUE(AddTensor(*dst, t).ok());
    ASSERT_TRUE(AddDenseShards(*src, i, smesh,
                               {Placement::Replicate(), Placement::Shard(rng() % 2)})
                    .ok());
    ASSERT_TRUE(AddDenseShards(*dst, i, dmesh,
                               {Placement::Replicate(), Placement::Shard(0)})
                    .ok());
  }
}

TEST(PlacedPlanTest, PredictionMatchesTheMessagesAndTheBoundStaysBelow) {
  std::mt19937_64 rng(20261124);
  int placed = 0, tight = 0, with_gpus = 0, same_gpu_seen = 0;
  for (int iter = 0; iter < 200; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    SideLayout src, dst;
    Sides(rng, &src, &dst);
    if (HasFailure()) return;
    PlannerOptions opt;
    if (rng() % 4 != 0) {
      const int hosts = 1 + rng() % 3;
      for (int r = 0; r < src.world_size; ++r) src.host_of_rank.push_back(rng() % hosts);
      for (int r = 0; r < dst.world_size; ++r) dst.host_of_rank.push_back(rng() % hosts);
      ++placed;
      if (rng() % 2 == 0) {
        // GPU g of host h is id 2h + g (two GPUs per host), some unknown.
        for (auto* side : {&src, &dst}) {
          for (int32_t h : side->host_of_rank) {
            side->gpu_of_rank.push_back(rng() % 5 == 0 ? -1 : 2 * h + rng() % 2);
          }
        }
        ++with_gpus;
      }
    }
    opt.links.same_gpu_gbps = 50 + rng() % 2000;
    opt.links.intra_host_gbps = 10 + rng() % 400;
    opt.links.inter_host_gbps = 1 + rng() % 100;
    absl::StatusOr<Plan> plan = BuildPlan(src, dst, opt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    LinkBytes by_class;
    const double t = PredictFromMessages(*plan, &by_class);
    EXPECT_NEAR(plan->stats.predicted_seconds, t, 1e-9 * t);
    EXPECT_EQ(plan->stats.same_gpu_bytes, by_class.bytes[0]);
    EXPECT_EQ(plan->stats.intra_host_bytes, by_class.bytes[1]);
    EXPECT_EQ(plan->stats.inter_host_bytes, by_class.bytes[2]);
    same_gpu_seen += by_class.bytes[0] > 0;
    EXPECT_GT(plan->stats.lower_bound_seconds, 0);
    EXPECT_LE(plan->stats.lower_bound_seconds, t * (1 + 1e-9));
    tight += t <= 1.05 * plan->stats.lower_bound_seconds;
  }
  EXPECT_GT(placed, 100);
  EXPECT_GT(with_gpus, 50);
  EXPECT_GT(same_gpu_seen, 20);
  EXPECT_GT(tight, 100);  // most random cases reach the bound
}

TEST(PlacedPlanTest, GlooSpeedsPredictHostLinksNotGpuLinks) {
  std::mt19937_64 rng(20261206);
  SideLayout src, dst;
  Sides(rng, &src, &dst);
  if (HasFailure()) return;
  for (int r = 0; r < src.world_size; ++r) src.host_of_rank.push_back(0);
  for (int r = 0; r < dst.world_size; ++r) dst.host_of_rank.push_back(0);
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // One host: every byte at loopback TCP's 1 GB/s instead of NVLink's 370.
  LinkBytes by_class;
  const double gloo = PredictedSeconds(*plan, GlooLinkSpeeds(), &by_class);
  EXPECT_EQ(by_class.bytes[2], 0);
  EXPECT_NEAR(gloo, 370 * plan->stats.predicted_seconds, 1e-9 * gloo);
  int64_t busiest = 0;
  std::vector<int64_t> received(plan->dst.world_size), sent(plan->src.world_size);
  for (const Message& m : plan->messages) {
    busiest = std::max({busiest, received[m.dst_rank] += m.bytes, sent[m.src_rank] += m.bytes});
  }
  EXPECT_NEAR(gloo, busiest / 1e9, 1e-9 * gloo);
}

TEST(PlacedPlanTest, EachEngineRankReadsFromTheReplicaOnItsGpu) {
  // A [64, 64] f32 tensor replicated on 4 trainer ranks, two per host; 4
  // engine ranks holding all of it, colocated in reverse: engine rank r on
  // trainer rank 3 - r's GPU. Every replica on the engine's host is as
  // near by NVLink, but the one on its own GPU is faster still.
  TensorSpec t{"w", {64, 64}, DType::kF32};
  SideLayout src, dst;
  src.world_size = dst.world_size = 4;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {4}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"dp"}, {4}), {Placement::Replicate()}).ok());
  src.host_of_rank = {0, 0, 1, 1};
  dst.host_of_rank = {1, 1, 0, 0};
  src.gpu_of_rank = {0, 1, 2, 3};
  dst.gpu_of_rank = {3, 2, 1, 0};
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Message& m : plan->messages) EXPECT_EQ(m.src_rank, 3 - m.dst_rank);
  EXPECT_EQ(plan->stats.same_gpu_bytes, 4 * 64 * 64 * 4);
  EXPECT_EQ(plan->stats.intra_host_bytes + plan->stats.inter_host_bytes, 0);
  EXPECT_DOUBLE_EQ(plan->stats.predicted_seconds, 64 * 64 * 4 / 1900e9);
  EXPECT_DOUBLE_EQ(plan->stats.predicted_seconds, plan->stats.lower_bound_seconds);
  // Without GPUs the same placement is same-host at NVLink speed.
  src.gpu_of_rank.clear();
  dst.gpu_of_rank.clear();
  plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stats.same_gpu_bytes, 0);
  EXPECT_EQ(plan->stats.intra_host_bytes, 4 * 64 * 64 * 4);
  EXPECT_DOUBLE_EQ(plan->stats.predicted_seconds, 64 * 64 * 4 / 370e9);
}

TEST(PlacedPlanTest, ReplicatedTensorsComeFromTheEngineRanksOwnGpuEvenFromABusierTrainer) {
  // Colocated TP2 -> TP1 x DP2 on GPUs 0-1: trainer rank 0 holds the
  // larger chunk of "w" (rows 0-4 of 9) and so sends the most; the norm
  // "n" is replicated on both trainer ranks. Every engine rank still reads
  // its norm from the trainer rank on its own GPU, never across NVLink.
  SideLayout src, dst;
  src.world_size = dst.world_size = 2;
  const Mesh tp = *Mesh::Make({"tp"}, {2});
  const Mesh dp = *Mesh::Make({"dp"}, {2});
  for (const TensorSpec& t : {TensorSpec{"w", {9, 64}, DType::kBF16},
                              TensorSpec{"n", {64}, DType::kBF16}}) {
    ASSERT_TRUE(AddTensor(src, t).ok());
    ASSERT_TRUE(AddTensor(dst, t).ok());
  }
  ASSERT_TRUE(AddDenseShards(src, 0, tp, {Placement::Shard(0)}).ok());
  ASSERT_TRUE(AddDenseShards(src, 1, tp, {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, dp, {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 1, dp, {Placement::Replicate()}).ok());
  src.host_of_rank = dst.host_of_rank = {0, 0};
  src.gpu_of_rank = dst.gpu_of_rank = {0, 1};
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  int norms = 0;
  for (const Segment& s : plan->segments) {
    if (plan->src.records[s.src_record].tensor != 1) continue;
    ++norms;
    EXPECT_EQ(plan->src.records[s.src_record].rank, plan->dst.records[s.dst_record].rank)
        << "engine rank " << plan->dst.records[s.dst_record].rank
        << " reads its norm from the other GPU";
  }
  EXPECT_EQ(norms, 2);
  EXPECT_EQ(plan->stats.same_gpu_bytes, (5 + 4) * 64 * 2 + 2 * 64 * 2);
  EXPECT_EQ(plan->stats.intra_host_bytes, (4 + 5) * 64 * 2);
}

TEST(PlacedPlanTest, RejectsAGpuOnTwoHostsAndGpusWithoutHosts) {
  TensorSpec t{"w", {8, 8}, DType::kF32};
  SideLayout src, dst;
  src.world_size = dst.world_size = 1;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {1}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"dp"}, {1}), {Placement::Replicate()}).ok());
  src.host_of_rank = {0};
  dst.host_of_rank = {1};
  src.gpu_of_rank = {7};
  dst.gpu_of_rank = {7};
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("GPU 7 is on host 0 for trainer rank 0 and on "
                                         "host 1 for engine rank 0"),
            std::string::npos)
      << plan.status();
  dst.host_of_rank.clear();
  dst.gpu_of_rank = {3};
  plan = BuildPlan(src, dst, PlannerOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("engine gives GPUs (gpu_of_rank) but no hosts"),
            std::string::npos)
      << plan.status();
  dst.gpu_of_rank = {-2};
  dst.host_of_rank = {0};
  plan = BuildPlan(src, dst, PlannerOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlacedPlanTest, EachEngineRankReadsFromTheReplicaOnItsHost) {
  // A [64, 64] f32 tensor replicated on 4 trainer ranks, one per host;
  // 4 engine ranks holding all of it, engine rank r on host 3 - r.
  TensorSpec t{"w", {64, 64}, DType::kF32};
  SideLayout src, dst;
  src.world_size = dst.world_size = 4;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, *Mesh::Make({"dp"}, {4}), {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, *Mesh::Make({"dp"}, {4}), {Placement::Replicate()}).ok());
  src.host_of_rank = {0, 1, 2, 3};
  dst.host_of_rank = {3, 2, 1, 0};
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Message& m : plan->messages) EXPECT_EQ(m.src_rank, 3 - m.dst_rank);
  EXPECT_EQ(plan->stats.inter_host_bytes, 0);
  EXPECT_DOUBLE_EQ(plan->stats.predicted_seconds, plan->stats.lower_bound_seconds);
  // Without the placement every pair is inter-host: the same bytes, the
  // network's time.
  PlannerOptions unplaced;
  unplaced.prefer_same_host = false;
  plan = BuildPlan(src, dst, unplaced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stats.intra_host_bytes, 0);
  EXPECT_NEAR(plan->stats.predicted_seconds, 64 * 64 * 4 / 50e9, 1e-15);
}

}  // namespace
}  // namespace refit
