// Tests of relay plans (PlannerOptions::relay): a hand-worked plan, and
// randomized replicated engines whose every byte is checked after the
// plan runs in wave order, with relays reading only bytes an earlier wave
// wrote.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "layout/dtype.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/conversion.h"
#include "plan/cost.h"
#include "plan/fingerprint.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "plan/relay_roots.h"
#include "testing/reference_copy.h"
#include "testing/wave_order_run.h"

namespace refit {
namespace {

// One f32 tensor "w" [4, 8] (128 bytes), held whole by one trainer rank on
// host 0 and by each of `replicas` engine ranks, engine rank r on host 1 + r.
void WholeTensorLayouts(int32_t replicas, SideLayout* src, SideLayout* dst) {
  TensorSpec t;
  t.name = "w";
  t.shape = {4, 8};
  t.dtype = DType::kF32;
  src->world_size = 1;
  dst->world_size = replicas;
  ASSERT_TRUE(AddTensor(*src, t).ok());
  ASSERT_TRUE(AddTensor(*dst, t).ok());
  Mesh one = *Mesh::Make({"x"}, {1}, {0});
  ASSERT_TRUE(AddDenseShards(*src, 0, one, {Placement::Replicate()}).ok());
  src->host_of_rank = {0};
  for (int32_t r = 0; r < replicas; ++r) {
    Mesh m = *Mesh::Make({"x"}, {1}, {r});
    ASSERT_TRUE(AddDenseShards(*dst, 0, m, {Placement::Replicate()}).ok());
    dst->host_of_rank.push_back(1 + r);
  }
}

TEST(RelayTest, HandWorkedTwoReplicas) {
  SideLayout src, dst;
  WholeTensorLayouts(2, &src, &dst);
  PlannerOptions o;
  o.relay = true;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The trainer sends the 128 bytes once, to engine rank 0 (a tie, the
  // first); engine rank 0 forwards them to engine rank 1 one wave later,
  // from its own buffer.
  ASSERT_EQ(plan->messages.size(), 2u);
  const Message& a = plan->messages[0];
  const Message& b = plan->messages[1];
  EXPECT_FALSE(a.relay);
  EXPECT_EQ(a.src_rank, 0);
  EXPECT_EQ(a.dst_rank, 0);
  EXPECT_EQ(a.wave, 0);
  EXPECT_EQ(a.bytes, 128);
  EXPECT_TRUE(b.relay);
  EXPECT_EQ(b.src_rank, 0);
  EXPECT_EQ(b.dst_rank, 1);
  EXPECT_EQ(b.wave, 1);
  EXPECT_EQ(b.bytes, 128);
  EXPECT_TRUE(b.src_contiguous);
  EXPECT_EQ(plan->dst.buffers[b.src_buffer].rank, 0);
  EXPECT_EQ(plan->dst.records[plan->segments[b.first_segment].src_record].rank, 0);
  ASSERT_EQ(plan->waves.size(), 2u);
  EXPECT_EQ(plan->stats.bytes_sent, std::vector<int64_t>({128}));
  EXPECT_EQ(plan->stats.bytes_forwarded, std::vector<int64_t>({128, 0}));
  EXPECT_EQ(plan->stats.bytes_received, std::vector<int64_t>({128, 128}));
  EXPECT_EQ(plan->stats.relay_depth, 1);
  const double t = 128 / (o.links.inter_host_gbps * 1e9);
  EXPECT_DOUBLE_EQ(plan->stats.predicted_seconds, t);
  EXPECT_DOUBLE_EQ(plan->stats.lower_bound_seconds, t);
  EXPECT_DOUBLE_EQ(plan->stats.sender_lower_bound_seconds, 2 * t);
  EXPECT_EQ(plan->stats.inter_host_bytes, 256);

  // Without relays the trainer sends it twice.
  o.relay = false;
  absl::StatusOr<Plan> direct = BuildPlan(src, dst, o);
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_EQ(direct->messages.size(), 2u);
  for (const Message& m : direct->messages) EXPECT_FALSE(m.relay);
  EXPECT_EQ(direct->stats.bytes_sent, std::vector<int64_t>({256}));
  EXPECT_DOUBLE_EQ(direct->stats.predicted_seconds, 2 * t);
  EXPECT_DOUBLE_EQ(direct->stats.lower_bound_seconds, 2 * t);
  EXPECT_EQ(direct->stats.relay_depth, 0);
}

// PredictedSeconds (the model refitd re-times plans with, e.g. at Gloo's
// speeds) reads relays as the planner does: the relaying engine rank's
// egress apart from its ingress, never a trainer rank's.
TEST(RelayTest, PredictedSecondsCountsRelaysOnTheirEngineSender) {
  SideLayout src, dst;
  WholeTensorLayouts(8, &src, &dst);
  PlannerOptions o;
  o.relay = true;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->stats.relay_depth, 0);
  EXPECT_DOUBLE_EQ(PredictedSeconds(*plan, plan->options.links), plan->stats.predicted_seconds);
  // At Gloo's speeds every pair is across hosts: the busiest of the
  // trainer's egress, an engine rank's ingress and its egress, at 1.25 GB/s.
  int64_t busiest = 0;
  for (const auto* v : {&plan->stats.bytes_sent, &plan->stats.bytes_received,
                        &plan->stats.bytes_forwarded}) {
    for (int64_t b : *v) busiest = std::max(busiest, b);
  }
  LinkBytes by_class;
  EXPECT_DOUBLE_EQ(PredictedSeconds(*plan, GlooLinkSpeeds(), &by_class), busiest / 1.25e9);
  EXPECT_EQ(by_class.bytes[2], plan->stats.total_bytes);
}

TEST(RelayTest, SameHostReplicasRelayOverNvlink) {
  // Four replicas, two per host: each host takes the bytes across hosts
  // once, the other replica on it gets them inside the host (engine rank
  // 0 -> 1 inside host 1, 1 -> 2 across, 2 -> 3 inside host 2: rank 0's
  // link is busiest with the trainer's bytes).
  SideLayout src, dst;
  WholeTensorLayouts(4, &src, &dst);
  dst.host_of_rank = {1, 1, 2, 2};
  PlannerOptions o;
  o.relay = true;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stats.bytes_sent, std::vector<int64_t>({128}));
  EXPECT_EQ(plan->stats.intra_host_bytes, 256);
  EXPECT_EQ(plan->stats.inter_host_bytes, 256);
  EXPECT_EQ(plan->stats.relay_depth, 3);
}

// A chain: one trainer rank feeding 8 engine hosts; the tensor goes in
// waves sized by the chain's depth. The trainer sends each byte once,
// each host forwards each byte once to the next, and forwarding is
// pipelined: a relay forwards a split in the wave after it arrived, so the
// last engine rank is done depth waves after the trainer's last wave.
void PipelinedChainChecks(const Plan& plan);

TEST(RelayTest, ChainForwardsEachSplitTheWaveAfterItArrives) {
  SideLayout src, dst;
  TensorSpec t;
  t.name = "w";
  t.shape = {64, 1024};  // 256 KiB of f32, rows of 4 KiB
  t.dtype = DType::kF32;
  src.world_size = 1;
  dst.world_size = 8;
  ASSERT_TRUE(AddTensor(src, t).ok());
  ASSERT_TRUE(AddTensor(dst, t).ok());
  Mesh one = *Mesh::Make({"x"}, {1}, {0});
  ASSERT_TRUE(AddDenseShards(src, 0, one, {Placement::Replicate()}).ok());
  src.host_of_rank = {0};
  for (int32_t r = 0; r < 8; ++r) {
    Mesh m = *Mesh::Make({"x"}, {1}, {r});
    ASSERT_TRUE(AddDenseShards(dst, 0, m, {Placement::Replicate()}).ok());
    dst.host_of_rank.push_back(1 + r);
  }
  PlannerOptions o;
  o.relay = true;
  o.staging_budget_bytes = 1 << 20;
  o.num_lanes = 2;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  PipelinedChainChecks(*plan);
}

// ---- randomized replicated engines ----

// 1 to 4 tensors of rank 1 to 3 (extents 1..9), each bf16, f32 or e4m3.
std::vector<TensorSpec> RandomTensors(std::mt19937_64& rng) {
  const DType dts[] = {DType::kBF16, DType::kF32, DType::kF8E4M3};
  std::vector<TensorSpec> ts(1 + rng() % 4);
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i].name = absl::StrCat("t", i);
    ts[i].shape.resize(1 + rng() % 3);
    for (int64_t& e : ts[i].shape) e = 1 + rng() % 9;
    ts[i].dtype = dts[rng() % 3];
  }
  return ts;
}

std::vector<Placement> RandomPlacements(std::mt19937_64& rng, int axes, int tensor_rank) {
  std::vector<Placement> p;
  for (int a = 0; a < axes; ++a) {
    p.push_back(rng() % 3 != 0 ? Placement::Shard(rng() % tensor_rank) : Placement::Replicate());
  }
  return p;
}

// Adds tensors `ts` sharded over a 2-axis mesh of the ranks [first, first +
// a * b) with `placements` (one per tensor).
void AddMesh(SideLayout* side, const std::vector<TensorSpec>& ts, int32_t first, int64_t a,
             int64_t b, const std::vector<std::vector<Placement>>& placements) {
  std::vector<int32_t> ranks;
  for (int64_t i = 0; i < a * b; ++i) ranks.push_back(first + static_cast<int32_t>(i));
  Mesh mesh = *Mesh::Make({"x", "y"}, {a, b}, ranks);
  for (size_t i = 0; i < ts.size(); ++i) {
    ASSERT_TRUE(AddDenseShards(*side, static_cast<int32_t>(i), mesh, placements[i],
                               absl::StrCat(ts[i].name, "@", first))
                    .ok());
  }
}

// Runs `plan` in wave order on host memory (testing/wave_order_run.h):
// every engine byte right, relays reading only what earlier waves wrote.
void RunAndCheck(const Plan& plan) { ASSERT_EQ(testing::RunInWaveOrder(plan), ""); }

void PipelinedChainChecks(const Plan& plan) {
  RunAndCheck(plan);
  const int64_t bytes = 64 * 1024 * 4;
  EXPECT_EQ(plan.stats.bytes_sent, std::vector<int64_t>({bytes}));
  EXPECT_EQ(plan.stats.bytes_forwarded,
            std::vector<int64_t>({bytes, bytes, bytes, bytes, bytes, bytes, bytes, 0}));
  EXPECT_EQ(plan.stats.relay_depth, 7);
  // Waves sized by the depth (256 KiB / (4 x 7), at least 32 KiB: below
  // half a lane budget), messages of a quarter wave.
  EXPECT_EQ(plan.options.max_wave_bytes, 32 << 10);
  EXPECT_EQ(plan.options.max_message_bytes, 8 << 10);
  int32_t last_trainer_wave = 0, first_relay_wave = -1;
  for (const Message& m : plan.messages) {
    EXPECT_LE(m.bytes, plan.options.max_message_bytes);
    if (!m.relay) last_trainer_wave = std::max(last_trainer_wave, m.wave);
    if (m.relay && first_relay_wave < 0) first_relay_wave = m.wave;
  }
  EXPECT_GE(last_trainer_wave, 7);  // 256 KiB in waves of 32 KiB
  EXPECT_EQ(first_relay_wave, 1);
  EXPECT_EQ(static_cast<int32_t>(plan.waves.size()), last_trainer_wave + 1 + 7);
}

TEST(RelayTest, RandomReplicatedEnginesEveryByteOnceAfterItArrives) {
  std::mt19937_64 rng(44);
  int relayed = 0;
  for (int iter = 0; iter < 150; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    const std::vector<TensorSpec> ts = RandomTensors(rng);
    SideLayout src, dst;
    const int64_t sa = 1 + rng() % 2, sb = 1 + rng() % 2;
    src.world_size = static_cast<int32_t>(sa * sb);
    std::vector<std::vector<Placement>> sp;
    for (const TensorSpec& t : ts) {
      ASSERT_TRUE(AddTensor(src, t).ok());
      sp.push_back(RandomPlacements(rng, 2, static_cast<int>(t.shape.size())));
    }
    AddMesh(&src, ts, 0, sa, sb, sp);
    // Replicas of one engine layout (sometimes one of another layout).
    const int32_t replicas = 2 + rng() % 4;
    const int64_t ea = 1 + rng() % 2, eb = 1 + rng() % 2;
    dst.world_size = static_cast<int32_t>(replicas * ea * eb);
    for (const TensorSpec& t : ts) ASSERT_TRUE(AddTensor(dst, t).ok());
    std::vector<std::vector<Placement>> ep;
    for (const TensorSpec& t : ts) ep.push_back(RandomPlacements(rng, 2, static_cast<int>(t.shape.size())));
    for (int32_t r = 0; r < replicas; ++r) {
      std::vector<std::vector<Placement>> p = ep;
      if (r == replicas - 1 && rng() % 3 == 0) {
        for (size_t i = 0; i < ts.size(); ++i) {
          p[i] = RandomPlacements(rng, 2, static_cast<int>(ts[i].shape.size()));
        }
      }
      AddMesh(&dst, ts, static_cast<int32_t>(r * ea * eb), ea, eb, p);
    }
    // Hosts: sometimes none; engine hosts may hold several replicas and,
    // rarely, trainer ranks.
    if (rng() % 4 != 0) {
      const int32_t hosts = 1 + rng() % 4;
      for (int32_t k = 0; k < src.world_size; ++k) src.host_of_rank.push_back(rng() % 2);
      for (int32_t k = 0; k < dst.world_size; ++k) {
        dst.host_of_rank.push_back(rng() % 8 == 0 ? 0 : 2 + static_cast<int32_t>(k / (ea * eb)) % hosts);
      }
    }
    PlannerOptions o;
    o.relay = true;
    o.staging_budget_bytes = int64_t{64} << (rng() % 5);
    o.num_lanes = 1 + rng() % 2;
    o.max_message_bytes = rng() % 2 ? 0 : 16;
    o.direct_min_bytes = rng() % 2 ? 0 : 32;
    absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    RunAndCheck(*plan);
    // Bytes conserved: each engine rank receives its records' bytes.
    std::vector<int64_t> need(dst.world_size, 0);
    for (const Record& r : plan->dst.records) {
      need[r.rank] += UncheckedNumElements(r.box) * DTypeSize(plan->dst.tensors[r.tensor].dtype);
    }
    EXPECT_EQ(plan->stats.bytes_received, need);
    int64_t forwarded = 0;
    for (int64_t b : plan->stats.bytes_forwarded) forwarded += b;
    int64_t sent = 0;
    for (int64_t b : plan->stats.bytes_sent) sent += b;
    EXPECT_EQ(sent + forwarded, plan->stats.total_bytes);
    relayed += forwarded > 0;
    // Staging per engine rank (forwarded sends packed, receives unpacked)
    // stays within the budget; the bound holds.
    for (int64_t s : plan->stats.staging_dst) EXPECT_LE(s, o.staging_budget_bytes);
    EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
    EXPECT_LE(plan->stats.lower_bound_seconds,
              plan->stats.sender_lower_bound_seconds * (1 + 1e-12));
    // The wire keeps relays: the decoded plan has the same fingerprint,
    // and every rank's slice decodes.
    absl::StatusOr<Plan> back = FromProto(ToProto(*plan));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(PlanFingerprint(*back), plan->fingerprint);
    for (int32_t r = 0; r < dst.world_size; ++r) {
      absl::StatusOr<Plan> slice = FromProto(ToProto(ExtractSlice(*plan, Side::kEngine, r)));
      ASSERT_TRUE(slice.ok()) << "engine rank " << r << ": " << slice.status();
    }
  }
  EXPECT_GT(relayed, 50);  // the property is exercised
}

// ---- replicas of different layouts ----

// A Megatron-like TP8 trainer (host 0) holding bf16 "w" [32, 8] (column
// parallel, Shard(0)) and "o" [4, 32] (row parallel, Shard(1)); engine
// replicas of tensor parallel sizes `tps` (in order, replica i on host 1 +
// i), each holding "w" as e4m3 with its 4 x 4 block scales "w_scale_inv"
// [8, 2] (Shard(0)) and "o" as bf16 (Shard(1)).
void MixedTpLayouts(const std::vector<int32_t>& tps, SideLayout* src, SideLayout* dst) {
  const TensorSpec w{"w", {32, 8}, DType::kBF16}, o{"o", {4, 32}, DType::kBF16};
  src->world_size = 8;
  const int32_t sw = *AddTensor(*src, w), so = *AddTensor(*src, o);
  Mesh tp8 = *Mesh::Make({"tp"}, {8}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(AddDenseShards(*src, sw, tp8, {Placement::Shard(0)}, "w").ok());
  ASSERT_TRUE(AddDenseShards(*src, so, tp8, {Placement::Shard(1)}, "o").ok());
  src->host_of_rank.assign(8, 0);
  const int32_t dw = *AddTensor(*dst, WithFormat({"w", {32, 8}, DType::kF8E4M3},
                                                  QuantFormat::kFp8Block, QuantRole::kCodes));
  const int32_t ds =
      *AddTensor(*dst, WithFormat({ScaleTensorName("w"), {8, 2}, DType::kF32},
                                  QuantFormat::kFp8Block, QuantRole::kScales));
  const int32_t dout = *AddTensor(*dst, o);
  for (size_t i = 0; i < tps.size(); ++i) {
    std::vector<int32_t> ranks;
    for (int32_t k = 0; k < tps[i]; ++k) ranks.push_back(dst->world_size + k);
    dst->world_size += tps[i];
    dst->host_of_rank.insert(dst->host_of_rank.end(), tps[i], 1 + static_cast<int32_t>(i));
    Mesh m = *Mesh::Make({"tp"}, {tps[i]}, ranks);
    const std::string at = absl::StrCat("@", i);
    ASSERT_TRUE(AddDenseShards(*dst, dw, m, {Placement::Shard(0)}, "w" + at).ok());
    ASSERT_TRUE(AddDenseShards(*dst, ds, m, {Placement::Shard(0)}, "w_scale_inv" + at).ok());
    ASSERT_TRUE(AddDenseShards(*dst, dout, m, {Placement::Shard(1)}, "o" + at).ok());
  }
}

// Plans `tps` replicas with relays and checks what a user cares about:
// the plan takes the time of one replica (the trainer sends each byte
// about once), some replica forwards regions to a replica of the other
// layout, every byte of every replica (the FP8
// codes and scales exactly) is right, and the plan is within 1.05x of
// the relay-aware bound.
void CheckMixedTp(const std::vector<int32_t>& tps) {
  SideLayout src, dst;
  MixedTpLayouts(tps, &src, &dst);
  PlannerOptions o;
  o.relay = true;
  o.fp8_block = 4;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  RunAndCheck(*plan);
  // One replica's bytes: w (1 byte each), its scales (4), o (2).
  const int64_t replica_bytes = 32 * 8 + 8 * 2 * 4 + 4 * 32 * 2;
  int64_t sent = 0;
  for (int64_t b : plan->stats.bytes_sent) sent += b;
  // Flat in replicas: as fast as one TP4 replica alone (the time model's
  // bound is a TP4 rank's ingress), and faster than the trainer sending
  // every copy.
  SideLayout src1, dst1;
  MixedTpLayouts({4}, &src1, &dst1);
  absl::StatusOr<Plan> one = BuildPlan(src1, dst1, o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LE(plan->stats.predicted_seconds, 1.05 * one->stats.predicted_seconds);
  o.relay = false;
  absl::StatusOr<Plan> direct = BuildPlan(src, dst, o);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_LT(plan->stats.predicted_seconds, 0.5 * direct->stats.predicted_seconds);
  EXPECT_LT(sent, static_cast<int64_t>(tps.size()) * replica_bytes / 2);
  // Relayed bytes per (sending replica, receiving replica).
  std::vector<int32_t> replica_of;
  for (size_t i = 0; i < tps.size(); ++i) replica_of.insert(replica_of.end(), tps[i], i);
  std::map<std::pair<int32_t, int32_t>, int64_t> across;
  for (const Message& m : plan->messages) {
    if (m.relay) across[{replica_of[m.src_rank], replica_of[m.dst_rank]}] += m.bytes;
  }
  int64_t relayed = 0, mixed = 0;
  for (const auto& [pair, bytes] : across) {
    EXPECT_NE(pair.first, pair.second) << "a replica relays to itself";
    relayed += bytes;
    if (tps[pair.first] != tps[pair.second]) mixed += bytes;
  }
  EXPECT_EQ(sent + relayed, static_cast<int64_t>(tps.size()) * replica_bytes);
  EXPECT_GT(mixed, 0) << "no region crosses layouts";
  EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
  // The engines' FP8 codes and scales are those of the trainer's bf16
  // values, on every replica (the converted scratch computed by the
  // reference, not filled as a pattern).
  OwnedBuffers trainer = AllocateBuffers(src);
  FillPattern(src, trainer.ptrs);
  OwnedBuffers engine = AllocateBuffers(plan->dst);
  ASSERT_TRUE(ReferenceCopy(*plan, trainer.ptrs, engine.ptrs).ok());
  const std::map<std::string, DType> dtypes = SourceDTypes(src);
  PatternOptions po;
  po.source_dtypes = &dtypes;
  po.fp8_block = o.fp8_block;
  EXPECT_TRUE(CheckPattern(plan->dst, engine.ptrs, po).ok()) << CheckPattern(plan->dst, engine.ptrs, po);
}

// Five replicas: sending every copy from the trainer would take it 2.5x a
// TP4 rank's ingress, so regions must cross layouts.
TEST(RelayTest, Tp8ReplicaFeedsTp4Replicas) { CheckMixedTp({8, 4, 4, 4, 4}); }
TEST(RelayTest, Tp4ReplicasFeedTp8Replica) { CheckMixedTp({4, 4, 4, 4, 8}); }
TEST(RelayTest, MixedReplicasInterleaved) { CheckMixedTp({4, 8, 4, 8, 4}); }

TEST(RelayTest, RelayOffKeepsTrainerOnlyPlans) {
  SideLayout src, dst;
  WholeTensorLayouts(3, &src, &dst);
  PlannerOptions o;  // relay off by default
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Message& m : plan->messages) EXPECT_FALSE(m.relay);
  EXPECT_EQ(plan->stats.lower_bound_seconds, plan->stats.sender_lower_bound_seconds);
  EXPECT_EQ(plan->stats.bytes_forwarded, std::vector<int64_t>(3, 0));
  // The options' relay flag enters the fingerprint only when set.
  o.relay = true;
  absl::StatusOr<Plan> relayed = BuildPlan(src, dst, o);
  ASSERT_TRUE(relayed.ok());
  EXPECT_NE(relayed->fingerprint, plan->fingerprint);
}

// A delta plan with relays (PlannerOptions::delta) under a small staging
// budget: every engine rank's received plus sent bytes in a wave stay
// within the wave cap (a message above it alone), and its staged bytes
// within half the lane's share (a delta relay's lane room); every byte of
// every replica lands after the wave that brought it.
TEST(RelayTest, DeltaRelayWavesFitTheRelaysLaneRoom) {
  SideLayout src, dst;
  MixedTpLayouts({8, 4, 4, 4, 4}, &src, &dst);
  PlannerOptions o;
  o.relay = true;
  o.delta = true;
  o.fp8_block = 4;
  o.choose_lanes = false;
  o.staging_budget_bytes = 512;
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  RunAndCheck(*plan);
  const int64_t cap = plan->options.max_wave_bytes;
  const int64_t room = plan->options.staging_budget_bytes / plan->options.num_lanes / 2;
  ASSERT_GT(cap, 0);
  int64_t relays = 0;
  // (engine rank, wave) -> bytes moved, bytes staged, messages.
  std::map<std::pair<int32_t, int32_t>, std::tuple<int64_t, int64_t, int32_t>> use;
  for (const Message& m : plan->messages) {
    relays += m.relay;
    auto& d = use[{m.dst_rank, m.wave}];
    std::get<0>(d) += m.bytes;
    std::get<1>(d) += m.dst_contiguous ? 0 : m.bytes;
    ++std::get<2>(d);
    if (!m.relay) continue;
    auto& s = use[{m.src_rank, m.wave}];
    std::get<0>(s) += m.bytes;
    std::get<1>(s) += m.src_contiguous ? 0 : m.bytes;
    ++std::get<2>(s);
  }
  ASSERT_GT(relays, 0);
  for (const auto& [at, u] : use) {
    if (std::get<2>(u) == 1) continue;  // a message alone in its wave
    EXPECT_LE(std::get<0>(u), cap) << "engine rank " << at.first << " wave " << at.second;
    EXPECT_LE(std::get<1>(u), room) << "engine rank " << at.first << " wave " << at.second;
  }
}

// RelayArrivals: a region of an engine record delivered as one segment,
// in parts of two (a sub-region of each), or not all of it.
TEST(RelayArrivalsTest, PartsOfARegionAndWhetherTheyCoverIt) {
  Plan plan;
  for (int32_t half = 0; half < 2; ++half) {
    plan.segments.push_back(Segment{0, 0, Box::Unchecked({2 * half, 0}, {2, 8}), 32});
    Message m;
    m.dst_rank = 1;
    m.first_segment = half;
    m.num_segments = 1;
    plan.messages.push_back(m);
  }
  const RelayArrivals arrivals(plan);
  bool covered = false;
  auto parts = arrivals.PartsOf(1, 0, Box::Unchecked({2, 0}, {2, 8}), &covered);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].message, 1);
  EXPECT_TRUE(covered);
  parts = arrivals.PartsOf(1, 0, Box::Unchecked({1, 2}, {2, 4}), &covered);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].box, Box::Unchecked({1, 2}, {1, 4}));
  EXPECT_EQ(parts[1].box, Box::Unchecked({2, 2}, {1, 4}));
  EXPECT_TRUE(covered);
  parts = arrivals.PartsOf(1, 0, Box::Unchecked({3, 0}, {2, 8}), &covered);  // past the record
  EXPECT_EQ(parts.size(), 1u);
  EXPECT_FALSE(covered);
  EXPECT_TRUE(arrivals.PartsOf(0, 0, Box::Unchecked({0, 0}, {2, 8}), &covered).empty());
  EXPECT_FALSE(covered);
}

}  // namespace
}  // namespace refit
