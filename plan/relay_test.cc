// Tests of relay plans (PlannerOptions::relay): a hand-worked plan, and
// randomized replicated engines whose every byte is checked after the
// plan runs in wave order, with relays reading only bytes an earlier wave
// wrote.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "layout/dtype.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/cost.h"
#include "plan/fingerprint.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

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

// Runs `plan` message by message in wave order on host memory, checking
// that a relay reads only engine bytes an earlier wave wrote and that no
// engine byte is written twice; then checks every engine byte.
void RunAndCheck(const Plan& plan) {
  OwnedBuffers src = AllocateBuffers(plan.src);
  FillPattern(plan.src, src.ptrs);
  OwnedBuffers dst = AllocateBuffers(plan.dst);
  // The wave that wrote each engine byte (-1: none yet).
  std::vector<std::vector<int32_t>> written(plan.dst.buffers.size());
  for (size_t b = 0; b < plan.dst.buffers.size(); ++b) {
    written[b].assign(plan.dst.buffers[b].byte_size, -1);
  }
  for (const Message& m : plan.messages) {
    const SideLayout& from = m.relay ? plan.dst : plan.src;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan.segments[i];
      const Record& sr = from.records[s.src_record];
      const Record& dr = plan.dst.records[s.dst_record];
      ASSERT_EQ(sr.rank, m.src_rank);
      ASSERT_EQ(dr.rank, m.dst_rank);
      if (m.relay) {
        ASSERT_EQ(sr.tensor, dr.tensor);  // same bytes, no reconversion
        ASSERT_NE(sr.rank, dr.rank);
      }
      const int64_t es = DTypeSize(plan.dst.tensors[dr.tensor].dtype);
      Box::Indices g(s.box.origin().begin(), s.box.origin().end());
      if (IsEmpty(s.box)) continue;
      while (true) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < s.box.rank(); ++d) {
          so += DimOffset(sr.dims[d], g[d] - sr.box.origin(d));
          doff += DimOffset(dr.dims[d], g[d] - dr.box.origin(d));
        }
        const int32_t sb = RecordBuffer(sr, g.empty() ? 0 : g[0] - sr.box.origin(0));
        const int32_t db = RecordBuffer(dr, g.empty() ? 0 : g[0] - dr.box.origin(0));
        so = sr.byte_offset + so * es;
        doff = dr.byte_offset + doff * es;
        for (int64_t k = 0; k < es; ++k) {
          if (m.relay) {
            ASSERT_GE(written[sb][so + k], 0) << "relay reads a byte no wave wrote";
            ASSERT_LT(written[sb][so + k], m.wave) << "relay reads a byte of its own wave";
          }
          ASSERT_EQ(written[db][doff + k], -1) << "engine byte written twice";
          written[db][doff + k] = m.wave;
          dst.ptrs[db][doff + k] = (m.relay ? dst.ptrs : src.ptrs)[sb][so + k];
        }
        int d = s.box.rank() - 1;
        while (d >= 0 && ++g[d] == s.box.limit(d)) {
          g[d] = s.box.origin(d);
          --d;
        }
        if (d < 0) break;
      }
    }
  }
  ASSERT_TRUE(CheckPattern(plan.dst, dst.ptrs).ok()) << CheckPattern(plan.dst, dst.ptrs);
  // ReferenceCopy (wave order with relays) agrees.
  OwnedBuffers ref = AllocateBuffers(plan.dst);
  ASSERT_TRUE(ReferenceCopy(plan, src.ptrs, ref.ptrs).ok());
  ASSERT_TRUE(CheckPattern(plan.dst, ref.ptrs).ok());
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

}  // namespace
}  // namespace refit
