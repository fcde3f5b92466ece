// Delta and verified rounds whose relays cross engine layouts: a replica
// forwards regions cut otherwise than it received them (a sub-region of
// one message, a union of several) as the dense bytes of its buffer, and
// repeats the encoded payload where a region is the one it received.
// Every byte of every replica checked after every round, digests compared.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "testing/delta_rounds.h"
#include "exec/delta/delta_runner.h"
#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "layout/box.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"
#include "plan/wave_bytes.h"

namespace refit {
namespace {

using testing::Change;
using testing::CheckEngines;
using testing::JobOf;
using testing::RoundResult;
using testing::RunRound;

// A Megatron-like TP2 trainer (host 0) holding bf16 "w" [32, 16] (column
// parallel, Shard(0)), "o" [16, 32] (row parallel, Shard(1)) and f32 "n"
// [48] (replicated); engine replicas of tensor parallel sizes `tps` (in
// order, replica i on host 1 + i) holding the same, cut alike.
void MixedLayouts(const std::vector<int32_t>& tps, SideLayout* src, SideLayout* dst) {
  const TensorSpec w{"w", {32, 16}, DType::kBF16}, o{"o", {16, 32}, DType::kBF16},
      n{"n", {48}, DType::kF32};
  const std::vector<Placement> place[3] = {
      {Placement::Shard(0)}, {Placement::Shard(1)}, {Placement::Replicate()}};
  src->world_size = 2;
  src->host_of_rank = {0, 0};
  const Mesh tp2 = *Mesh::Make({"tp"}, {2}, {0, 1});
  int32_t t = 0;
  for (const TensorSpec& spec : {w, o, n}) {
    ASSERT_TRUE(AddTensor(*src, spec).ok());
    ASSERT_TRUE(AddTensor(*dst, spec).ok());
    ASSERT_TRUE(AddDenseShards(*src, t, tp2, place[t]).ok());
    ++t;
  }
  for (size_t i = 0; i < tps.size(); ++i) {
    std::vector<int32_t> ranks;
    for (int32_t k = 0; k < tps[i]; ++k) ranks.push_back(dst->world_size + k);
    dst->world_size += tps[i];
    dst->host_of_rank.insert(dst->host_of_rank.end(), tps[i], 1 + static_cast<int32_t>(i));
    const Mesh m = *Mesh::Make({"tp"}, {tps[i]}, ranks);
    for (t = 0; t < 3; ++t) {
      ASSERT_TRUE(AddDenseShards(*dst, t, m, place[t],
                                 absl::StrCat(dst->tensors[t].name, "@", i)).ok());
    }
  }
}

// The replica of each engine rank, for replicas of sizes `tps`.
std::vector<int32_t> ReplicaOf(const std::vector<int32_t>& tps) {
  std::vector<int32_t> of;
  for (size_t i = 0; i < tps.size(); ++i) of.insert(of.end(), tps[i], static_cast<int32_t>(i));
  return of;
}

// The plan the planner builds for `tps` without relays, rewritten so that
// each replica a `hops` entry (upstream, downstream) names gets all its
// bytes from the upstream replica instead of the trainer: each of its
// records, per upstream record of the tensor overlapping it (first come
// first taken), as a relay segment of the overlap, in a wave of its own
// per entry appended in `hops` order. Besides sub-regions (which the
// planner relays too: PlannedSubRegions), this plan forwards unions of
// what a relay received, which the planner does not.
Plan RelayedAcross(const std::vector<int32_t>& tps,
                   const std::vector<std::pair<int32_t, int32_t>>& hops) {
  SideLayout src, dst;
  MixedLayouts(tps, &src, &dst);
  PlannerOptions o;
  o.delta = true;
  o.choose_lanes = false;
  o.staging_budget_bytes = 64 << 10;
  Plan base = BuildPlan(src, dst, o).value();
  const std::vector<int32_t> replica = ReplicaOf(tps);
  std::set<int32_t> fed;
  for (const auto& [up, down] : hops) fed.insert(down);
  Plan plan = base;
  plan.messages.clear();
  plan.segments.clear();
  plan.waves.clear();
  auto add = [&plan](Message m, const std::vector<Segment>& segs) {
    m.first_segment = static_cast<int32_t>(plan.segments.size());
    m.num_segments = static_cast<int32_t>(segs.size());
    m.wave = static_cast<int32_t>(plan.waves.size());
    plan.segments.insert(plan.segments.end(), segs.begin(), segs.end());
    plan.messages.push_back(m);
  };
  for (const Wave& w : base.waves) {
    Wave kept = w;
    kept.first_message = static_cast<int32_t>(plan.messages.size());
    for (int32_t mi = w.first_message; mi < w.first_message + w.num_messages; ++mi) {
      const Message& m = base.messages[mi];
      if (fed.count(replica[m.dst_rank])) continue;
      add(m, std::vector<Segment>(base.segments.begin() + m.first_segment,
                                  base.segments.begin() + m.first_segment + m.num_segments));
    }
    kept.num_messages = static_cast<int32_t>(plan.messages.size()) - kept.first_message;
    if (kept.num_messages > 0) plan.waves.push_back(kept);
  }
  for (const auto& [up, down] : hops) {
    // (upstream rank, downstream rank) -> segments.
    std::map<std::pair<int32_t, int32_t>, std::vector<Segment>> pairs;
    for (size_t d = 0; d < dst.records.size(); ++d) {
      const Record& r = dst.records[d];
      if (replica[r.rank] != down) continue;
      std::vector<Box> taken;
      for (size_t u = 0; u < dst.records.size(); ++u) {
        const Record& ur = dst.records[u];
        if (replica[ur.rank] != up || ur.tensor != r.tensor || !Intersects(ur.box, r.box)) continue;
        const Box part = Intersect(ur.box, r.box);
        bool overlaps = false;
        for (const Box& b : taken) overlaps = overlaps || Intersects(b, part);
        if (overlaps) continue;
        taken.push_back(part);
        pairs[{ur.rank, r.rank}].push_back(
            Segment{static_cast<int32_t>(u), static_cast<int32_t>(d), part,
                    UncheckedNumElements(part) * DTypeSize(dst.tensors[r.tensor].dtype)});
      }
    }
    Wave w;
    w.lane = static_cast<int32_t>(plan.waves.size()) % plan.options.num_lanes;
    w.first_message = static_cast<int32_t>(plan.messages.size());
    for (const auto& [pair, segs] : pairs) {
      Message m;
      m.src_rank = pair.first;
      m.dst_rank = pair.second;
      m.relay = true;
      for (const Segment& s : segs) m.bytes += s.bytes;
      add(m, segs);
    }
    w.num_messages = static_cast<int32_t>(plan.messages.size()) - w.first_message;
    plan.waves.push_back(w);
  }
  SetWaveBytes(&plan);
  return plan;
}

// Replicas TP1 (A, fed by the trainer), TP4 (B), TP2 (C), TP1 (D), TP2
// (E): A forwards sub-regions of what it received to B; B forwards to C
// the regions it received (two B ranks per C rank); C forwards to D its
// whole shard, a union of two regions it received; A forwards to E the
// regions it received (E's halves are the trainer's).
const std::vector<int32_t> kTps = {1, 4, 2, 1, 2};
const std::vector<std::pair<int32_t, int32_t>> kHops = {{0, 1}, {0, 4}, {1, 2}, {2, 3}};

class AcrossLayouts : public ::testing::TestWithParam<bool> {};

// Dense, then delta rounds, the whole plan on every rank and slices as
// refitd hands them out (a trainer's slice carries the relays of its
// bytes, sub-regions included): every byte of every replica right, the
// digests of every relayed copy compared, each runner within the staging
// budget, and the regions forwarded as received repeating the trainer's
// encoded payloads.
TEST_P(AcrossLayouts, SubRegionsAndUnionsRelayEveryByte) {
  for (bool sliced : {false, true}) {
    SCOPED_TRACE(sliced ? "slices" : "whole plan");
    auto job = JobOf(RelayedAcross(kTps, kHops), GetParam());
    job->sliced = sliced;
    const int64_t relayed = testing::RelayedBytes(job->plan);
    ASSERT_GT(relayed, 0);
    for (double f : {1.0, 0.02, 0.005, 0.2, 0.0, 0.02}) {
      const bool dense = job->version == 0;
      RoundResult r;
      ASSERT_EQ(testing::ChangeAndCommit(job.get(), f, &r), "");
      int64_t forwarded_dense = 0;
      for (size_t g = 0; g < r.stats.size(); ++g) {
        EXPECT_LE(r.allocated_peak[g], job->plan.options.staging_budget_bytes) << "rank " << g;
        forwarded_dense += r.stats[g].forwarded_dense_bytes;
      }
      if (dense) {
        EXPECT_EQ(forwarded_dense, relayed) << "fraction " << f;
      } else if (f < 0.05) {
        // A -> E repeats the trainer's payloads; the cut regions go dense.
        EXPECT_LT(forwarded_dense, relayed) << "fraction " << f;
      }
    }
  }
}

// A byte flipped in a relay's buffer (TP1 replica A, which gets deltas
// from the trainer and forwards the byte dense to B, and on to C and D):
// the next round's commit fails naming the relay's rank and the tensor,
// the replicas downstream hold the flipped byte; the round after repairs
// every replica.
TEST_P(AcrossLayouts, AByteFlippedInARelayFailsTheCommitNamingIt) {
  auto job = JobOf(RelayedAcross(kTps, kHops), GetParam());
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  const Plan& plan = job->plan;
  const std::vector<int32_t> replica = ReplicaOf(kTps);
  const Record* rec = nullptr;
  for (const Record& r : plan.dst.records) {
    if (rec == nullptr && replica[r.rank] == 0 && plan.dst.tensors[r.tensor].name == "o") rec = &r;
  }
  ASSERT_NE(rec, nullptr);
  job->engine.storage[rec->buffer][rec->byte_offset + 2] ^= 0x10;
  RoundResult r = RunRound(job.get());  // nothing changed: an empty delta
  ASSERT_TRUE(absl::IsDataLoss(r.commit)) << r.commit;
  EXPECT_TRUE(absl::StrContains(r.commit.message(),
                                absl::StrCat("engine rank ", rec->rank, " tensor o")))
      << r.commit;
  EXPECT_NE(CheckEngines(*job), "");
  Change(job.get(), 0.02);
  RoundResult again = RunRound(job.get());
  ASSERT_TRUE(again.commit.ok()) << again.commit;
  EXPECT_EQ(CheckEngines(*job), "");
}

// A relay that never forwards (it connected, then died) in the middle of
// the chain (a B rank, feeding C the regions it cut from A's): the ranks
// it feeds fail within the round's deadline naming it; the next round,
// with the relay back, repairs every replica.
TEST_P(AcrossLayouts, ADeadRelayFailsItsDownstreamNamingIt) {
  auto job = JobOf(RelayedAcross(kTps, kHops), GetParam());
  const std::vector<int32_t> replica = ReplicaOf(kTps);
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  const Message* relay = nullptr;
  for (const Message& m : job->plan.messages) {
    if (relay == nullptr && m.relay && replica[m.src_rank] == 1) relay = &m;
  }
  ASSERT_NE(relay, nullptr);
  EXPECT_EQ(testing::DeadRelayFailsItsDownstream(job.get(), *relay), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, AcrossLayouts, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Gloo" : "InProc"; });

// The planner's relays between TP2 and TP1 replicas (both directions,
// regions cut alike) of a delta plan under a small staging budget (a
// relay's receives and forwards of a wave within its lane room): dense
// then delta rounds land every byte, digests compared, every runner
// within the budget.
// A job of the planner's delta plan with relays for replicas `tps`
// (MixedLayouts) under a staging budget of 4096 bytes.
std::unique_ptr<testing::Job> PlannedJob(const std::vector<int32_t>& tps, bool gloo) {
  SideLayout src, dst;
  MixedLayouts(tps, &src, &dst);
  PlannerOptions o;
  o.relay = true;
  o.delta = true;
  o.choose_lanes = false;
  o.staging_budget_bytes = 4096;
  return JobOf(BuildPlan(src, dst, o).value(), gloo);
}

TEST(PlannedAcrossLayouts, Tp2AndTp1ReplicasRelayToEachOther) {
  const std::vector<int32_t> tps = {2, 1, 2, 1, 2, 1};
  auto job = PlannedJob(tps, /*gloo=*/false);
  const int64_t budget = job->plan.options.staging_budget_bytes;
  const std::vector<int32_t> replica = ReplicaOf(tps);
  std::set<std::pair<int32_t, int32_t>> across;  // (sender's tp, receiver's tp)
  for (const Message& m : job->plan.messages) {
    if (m.relay && tps[replica[m.src_rank]] != tps[replica[m.dst_rank]]) {
      across.insert({tps[replica[m.src_rank]], tps[replica[m.dst_rank]]});
    }
  }
  ASSERT_FALSE(across.empty()) << "no relay crosses layouts";
  for (double f : {1.0, 0.02, 0.2, 0.0}) {
    Change(job.get(), f);
    RoundResult r = RunRound(job.get());
    for (size_t g = 0; g < r.status.size(); ++g) {
      ASSERT_TRUE(r.status[g].ok()) << "rank " << g << ": " << r.status[g];
      EXPECT_LE(r.allocated_peak[g], budget) << "rank " << g;
    }
    ASSERT_TRUE(r.commit.ok()) << "fraction " << f << ": " << r.commit;
    ASSERT_EQ(CheckEngines(*job), "") << "fraction " << f;
  }
}

// The planner's relays by region under a TP2 trainer: the TP2 replica
// forwards the TP4 replicas the sub-regions of what it received (each of
// its ranks' half of "w" and "o" cut in quarters), and the TP4 replicas
// relay those on; under a small staging budget (many waves, sub-regions
// forwarded while later waves arrive), over Gloo and in-process, the
// whole plan on every rank then slices: dense then delta rounds land
// every byte of every replica, digests compared,
// every runner within the budget, the trainer sending each weight byte
// once.
class PlannedSubRegions : public ::testing::TestWithParam<bool> {};

TEST_P(PlannedSubRegions, Tp2ReplicaFeedsTp4ReplicasEveryByte) {
  const std::vector<int32_t> tps = {2, 4, 4};
  auto job = PlannedJob(tps, GetParam());
  const Plan& plan = job->plan;
  const std::vector<int32_t> replica = ReplicaOf(tps);
  // Bytes the TP2 replica forwards as a sub-region of a record it holds.
  int64_t sub = 0, from_trainer = 0;
  for (const Message& m : plan.messages) {
    if (!m.relay) from_trainer += m.bytes;
    if (!m.relay || tps[replica[m.src_rank]] != 2) continue;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& sg = plan.segments[i];
      const Box& held = plan.dst.records[sg.src_record].box;
      if (!(held == sg.box) && Contains(held, sg.box)) sub += sg.bytes;
    }
  }
  ASSERT_GT(sub, 0) << "the TP2 replica forwards no sub-region";
  // "w" and "o" (1 KiB each) once, "n" (192 bytes) at most once per rank.
  EXPECT_LE(from_trainer, 2 * 1024 + 192 * (1 + static_cast<int64_t>(plan.dst.world_size)));
  // The whole plan on every rank, then slices as refitd hands them out (a
  // trainer's slice carries the relays of its bytes, sub-regions too).
  for (double f : {1.0, 0.02, 0.2, 0.0, 0.005, -1.0, 0.02, 0.2}) {
    if (f < 0) {
      job->sliced = true;
      continue;
    }
    RoundResult r;
    ASSERT_EQ(testing::ChangeAndCommit(job.get(), f, &r), "")
        << "fraction " << f << (job->sliced ? ", slices" : "");
    for (size_t g = 0; g < r.status.size(); ++g) {
      EXPECT_LE(r.allocated_peak[g], plan.options.staging_budget_bytes) << "rank " << g;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PlannedSubRegions, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Gloo" : "InProc"; });

// A plan whose relay forwards bytes before the wave that brings them (C
// forwarding to D in the wave before B feeds C) is refused when C's runner
// is created, naming the ranks, the tensor and the wave.
TEST(DeltaRunnerRelays, AForwardBeforeItsBytesArriveIsRefused) {
  const Plan plan = RelayedAcross(kTps, {{0, 1}, {0, 4}, {2, 3}, {1, 2}});
  const std::vector<int32_t> replica = ReplicaOf(kTps);
  int32_t c = 0;
  while (replica[c] != 2) ++c;
  const int ws = plan.src.world_size;
  auto fabric = InProcFabric::Create(ws + plan.dst.world_size, plan.options.num_lanes).value();
  auto t = InProcTransport::Create(fabric, ws + c).value();
  OwnedBuffers b = AllocateBuffers(plan.dst, 0);
  std::vector<char*> p;
  for (auto& x : b.storage) p.push_back(reinterpret_cast<char*>(x.data()));
  auto r = DeltaRunner::Create(plan, Side::kEngine, c, p, t.get());
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("engine rank ", c, " relays")))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "no earlier wave")) << r.status();
}

}  // namespace
}  // namespace refit
