// Relays by region (plan/internal/relays.h): an engine rank that received
// a region of a source piece forwards the sub-regions other replicas need
// (a TP2 replica feeds TP4 replicas under a TP2 trainer), bf16 and FP8
// (codes and scales relayed as bytes). Every plan runs in wave order with
// every engine byte checked.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/conversion.h"
#include "plan/fingerprint.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"
#include "testing/wave_order_run.h"

namespace refit {
namespace {

// A Megatron-like trainer of tensor parallel size `trainer_tp` (host 0)
// holding bf16 "w" [64, 32] (column parallel, Shard(0)), "o" [32, 64] (row
// parallel, Shard(1)) and f32 "n" [48] (replicated), `layers` times (the
// layers after the first named "w.1", "o.1", "n.1", ...); engine replicas
// of tensor parallel sizes `tps` (in order, replica i on host hosts[i], or
// 1 + i when `hosts` is empty) holding the same, cut alike; with `fp8`
// the engines hold the "w"s as e4m3 with their 4 x 4 block scales
// (Shard(0)). With `trainer_dp` > 1 the trainer has that many replicas
// (ranks dp * trainer_tp + tp), all on host 0.
struct Layouts {
  SideLayout src, dst;
  std::vector<int32_t> replica_of;  // per engine rank
};
Layouts Make(int32_t trainer_tp, const std::vector<int32_t>& tps, bool fp8,
             const std::vector<int32_t>& hosts = {}, int32_t layers = 1,
             int32_t trainer_dp = 1) {
  Layouts l;
  const std::vector<Placement> col = {Placement::Shard(0)}, row = {Placement::Shard(1)},
                               rep = {Placement::Replicate()};
  const std::vector<Placement> tcol = {Placement::Replicate(), Placement::Shard(0)},
                               trow = {Placement::Replicate(), Placement::Shard(1)},
                               trep = {Placement::Replicate(), Placement::Replicate()};
  l.src.world_size = trainer_dp * trainer_tp;
  l.src.host_of_rank.assign(l.src.world_size, 0);
  std::vector<int32_t> ranks(l.src.world_size);
  for (int32_t k = 0; k < l.src.world_size; ++k) ranks[k] = k;
  const Mesh tm = *Mesh::Make({"dp", "tp"}, {trainer_dp, trainer_tp}, ranks);
  struct EngineTensors {
    int32_t w, scale, o, n;
  };
  std::vector<EngineTensors> et;
  for (int32_t layer = 0; layer < layers; ++layer) {
    const std::string sfx = layer == 0 ? "" : absl::StrCat(".", layer);
    const TensorSpec w{"w" + sfx, {64, 32}, DType::kBF16}, o{"o" + sfx, {32, 64}, DType::kBF16},
        n{"n" + sfx, {48}, DType::kF32};
    EXPECT_TRUE(AddDenseShards(l.src, *AddTensor(l.src, w), tm, tcol).ok());
    EXPECT_TRUE(AddDenseShards(l.src, *AddTensor(l.src, o), tm, trow).ok());
    EXPECT_TRUE(AddDenseShards(l.src, *AddTensor(l.src, n), tm, trep).ok());
    EngineTensors e;
    e.w = *AddTensor(l.dst, fp8 ? WithFormat({w.name, {64, 32}, DType::kF8E4M3},
                                             QuantFormat::kFp8Block, QuantRole::kCodes)
                                : w);
    e.scale = fp8 ? *AddTensor(l.dst, WithFormat({ScaleTensorName(w.name), {16, 8}, DType::kF32},
                                                 QuantFormat::kFp8Block, QuantRole::kScales))
                  : -1;
    e.o = *AddTensor(l.dst, o);
    e.n = *AddTensor(l.dst, n);
    et.push_back(e);
  }
  for (size_t i = 0; i < tps.size(); ++i) {
    ranks.clear();
    for (int32_t k = 0; k < tps[i]; ++k) ranks.push_back(l.dst.world_size + k);
    l.dst.world_size += tps[i];
    l.replica_of.insert(l.replica_of.end(), tps[i], static_cast<int32_t>(i));
    l.dst.host_of_rank.insert(l.dst.host_of_rank.end(), tps[i],
                              hosts.empty() ? 1 + static_cast<int32_t>(i) : hosts[i]);
    const Mesh m = *Mesh::Make({"tp"}, {tps[i]}, ranks);
    for (size_t layer = 0; layer < et.size(); ++layer) {
      const std::string at = absl::StrCat(layer == 0 ? "" : absl::StrCat(".", layer), "@", i);
      const EngineTensors& e = et[layer];
      EXPECT_TRUE(AddDenseShards(l.dst, e.w, m, col, "w" + at).ok());
      if (fp8) {
        EXPECT_TRUE(AddDenseShards(l.dst, e.scale, m, col, "w_scale_inv" + at).ok());
      }
      EXPECT_TRUE(AddDenseShards(l.dst, e.o, m, row, "o" + at).ok());
      EXPECT_TRUE(AddDenseShards(l.dst, e.n, m, rep, "n" + at).ok());
    }
  }
  return l;
}

PlannerOptions Options(bool relay) {
  PlannerOptions o;
  o.relay = relay;
  o.fp8_block = 4;
  return o;
}

// Bytes a relay forwards as a sub-region of what its sender holds (the
// segment's box strictly inside the box its sender's record shares with
// the source piece: smaller than the record's own box), per tensor name.
std::map<std::string, int64_t> SubRegionBytes(const Plan& plan) {
  std::map<std::string, int64_t> out;
  for (const Message& m : plan.messages) {
    if (!m.relay) continue;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan.segments[i];
      const Record& from = plan.dst.records[s.src_record];
      const Record& to = plan.dst.records[s.dst_record];
      if (!(from.box == to.box) && Contains(from.box, to.box)) {
        out[plan.dst.tensors[to.tensor].name] += s.bytes;
      }
    }
  }
  return out;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Checks that the engines' FP8 codes and scales are those of the
// trainer's bf16 values on every replica of `plan` (the converted scratch
// computed by the reference, not filled as a pattern).
void ExpectTrainersFp8Values(const Layouts& l, const Plan& plan) {
  OwnedBuffers trainer = AllocateBuffers(l.src);
  FillPattern(l.src, trainer.ptrs);
  OwnedBuffers engine = AllocateBuffers(plan.dst);
  ASSERT_TRUE(ReferenceCopy(plan, trainer.ptrs, engine.ptrs).ok());
  const std::map<std::string, DType> dtypes = SourceDTypes(l.src);
  PatternOptions po;
  po.source_dtypes = &dtypes;
  po.fp8_block = 4;
  EXPECT_TRUE(CheckPattern(plan.dst, engine.ptrs, po).ok())
      << CheckPattern(plan.dst, engine.ptrs, po);
}

// Plans `tps` under a TP `trainer_tp` trainer with relays and checks what
// a user cares about: every byte of every replica right (FP8 codes and
// scales those of the trainer's values), the trainer sends one copy of
// the model, TP2 ranks forward sub-regions to TP4 ranks, the plan takes at
// most 1.15x the time of one replica of each layout and is within 1.05x of
// the relay-aware bound, and the plan survives the wire (refitd hands it
// out; the dry run prints the same fingerprint).
void CheckSubRegionRelays(int32_t trainer_tp, const std::vector<int32_t>& tps, bool fp8) {
  Layouts l = Make(trainer_tp, tps, fp8);
  absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
  // One copy of the model leaves the trainer: each engine tensor's bytes.
  int64_t model = 0;
  for (const TensorSpec& t : plan->dst.tensors) {
    int64_t e = 1;
    for (int64_t x : t.shape) e *= x;
    model += e * DTypeSize(t.dtype);
  }
  // Each weight's bytes leave the trainer once (a small replicated tensor
  // may leave twice where the trainer's link has room).
  std::map<std::string, int64_t> from_trainer;
  for (const Message& m : plan->messages) {
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments && !m.relay; ++i) {
      const Segment& s = plan->segments[i];
      from_trainer[plan->dst.tensors[plan->dst.records[s.dst_record].tensor].name] += s.bytes;
    }
  }
  for (const TensorSpec& t : plan->dst.tensors) {
    if (t.name == "n") continue;
    int64_t e = 1;
    for (int64_t x : t.shape) e *= x;
    EXPECT_EQ(from_trainer[t.name], e * DTypeSize(t.dtype)) << t.name;
  }
  EXPECT_LT(Sum(plan->stats.bytes_sent), 1.1 * model);
  EXPECT_EQ(Sum(plan->stats.bytes_sent) + Sum(plan->stats.bytes_forwarded),
            plan->stats.total_bytes);
  const std::map<std::string, int64_t> sub = SubRegionBytes(*plan);
  EXPECT_GT(sub.count("w") ? sub.at("w") : 0, 0) << "no sub-region of w relayed";
  EXPECT_GT(sub.count("o") ? sub.at("o") : 0, 0) << "no sub-region of o relayed";
  if (fp8) {
    EXPECT_GT(sub.count(ScaleTensorName("w")) ? sub.at(ScaleTensorName("w")) : 0, 0)
        << "no sub-region of the FP8 scales relayed";
  }
  EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
  EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
  std::vector<int32_t> one_each = tps;
  std::sort(one_each.begin(), one_each.end());
  one_each.erase(std::unique(one_each.begin(), one_each.end()), one_each.end());
  Layouts l1 = Make(trainer_tp, one_each, fp8);
  absl::StatusOr<Plan> one = BuildPlan(l1.src, l1.dst, Options(true));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LE(plan->stats.predicted_seconds, 1.15 * one->stats.predicted_seconds);
  // Without relays the trainer sends every replica's copy.
  absl::StatusOr<Plan> direct = BuildPlan(l.src, l.dst, Options(false));
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(Sum(direct->stats.bytes_sent), direct->stats.total_bytes);
  EXPECT_GE(direct->stats.predicted_seconds, 2 * plan->stats.predicted_seconds);
  absl::StatusOr<Plan> back = FromProto(ToProto(*plan));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PlanFingerprint(*back), plan->fingerprint);
  if (fp8) ExpectTrainersFp8Values(l, *plan);
}

TEST(RegionRelayTest, Tp2ReplicaFeedsTp4ReplicasUnderTp2Trainer) {
  CheckSubRegionRelays(2, {2, 4, 4, 4}, /*fp8=*/false);
}
TEST(RegionRelayTest, Tp2ReplicaFeedsTp4ReplicasFp8CodesAndScales) {
  CheckSubRegionRelays(2, {2, 4, 4, 4}, /*fp8=*/true);
}
TEST(RegionRelayTest, Tp1ReplicaFeedsTp2ReplicasUnderTp1Trainer) {
  CheckSubRegionRelays(1, {1, 2, 2, 2}, /*fp8=*/false);
}
TEST(RegionRelayTest, NestedTp1Tp2Tp4Replicas) {
  CheckSubRegionRelays(1, {4, 2, 1, 4, 2}, /*fp8=*/false);
}

// A sub-region relay is ready once the parts of its region have arrived,
// not after the trainer's last wave: under a small staging budget (many
// waves) some TP4 rank gets a sub-region forwarded before the trainer's
// last wave.
TEST(RegionRelayTest, SubRegionForwardedBeforeTheTrainersLastWave) {
  Layouts l = Make(2, {2, 4, 4}, /*fp8=*/false);
  PlannerOptions o = Options(true);
  o.staging_budget_bytes = 256;
  o.choose_lanes = false;
  absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
  int32_t last_trainer = 0, first_cross = -1;
  for (const Message& m : plan->messages) {
    if (!m.relay) last_trainer = std::max(last_trainer, m.wave);
    if (m.relay && l.replica_of[m.src_rank] == 0 && (first_cross < 0 || m.wave < first_cross)) {
      first_cross = m.wave;
    }
  }
  ASSERT_GE(first_cross, 0) << "the TP2 replica forwards nothing";
  EXPECT_LT(first_cross, last_trainer);
  for (int64_t s : plan->stats.staging_dst) EXPECT_LE(s, o.staging_budget_bytes);
}

// Trainer and engine ranks sharing hosts: the TP2 replica on the
// trainer's host feeds the TP4 replicas sub-regions, every byte lands, the
// plan beats the trainer sending every copy, and with 8 layers it is
// within 1.05x of the relay-aware bound (the trainer's host sends out what
// the other hosts need through its trainer and engine ranks). With one
// layer a rank's bytes are a few 1 KiB units that no plan splits: the
// trainer's host exports 8 quarters and "n" through 4 ranks, two of which
// also feed the TP2 replica, so no plan beats 1.09x the bound there.
TEST(RegionRelayTest, SharedHostsRelaySubRegions) {
  for (int32_t layers : {1, 8}) {
    SCOPED_TRACE(absl::StrCat(layers, " layers"));
    Layouts l = Make(2, {2, 4, 4, 4}, /*fp8=*/false, /*hosts=*/{0, 1, 1, 2}, layers);
    absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
    EXPECT_FALSE(SubRegionBytes(*plan).empty());
    EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
    EXPECT_LE(plan->stats.predicted_seconds,
              (layers > 1 ? 1.05 : 1.2) * plan->stats.lower_bound_seconds);
    absl::StatusOr<Plan> direct = BuildPlan(l.src, l.dst, Options(false));
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_LT(plan->stats.predicted_seconds, direct->stats.predicted_seconds);
  }
}

// The TP2 replica on the trainer's own GPUs (a device-local copy feeds
// it) and TP4 replicas on two other hosts, 8 layers: the TP2 replica's
// ranks forward what the other hosts need beside the trainer's ranks,
// every byte lands, and the plan is within 1.05x of the relay-aware bound.
TEST(RegionRelayTest, ReplicaOnTheTrainersGpusForwardsToOtherHosts) {
  Layouts l = Make(2, {2, 4, 4}, /*fp8=*/false, /*hosts=*/{0, 1, 2}, /*layers=*/8);
  l.src.gpu_of_rank = {0, 1};
  l.dst.gpu_of_rank = {0, 1, 10, 11, 12, 13, 20, 21, 22, 23};
  absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
  int64_t forwarded_by_tp2 = 0;
  for (const Message& m : plan->messages) {
    if (m.relay && l.replica_of[m.src_rank] == 0) forwarded_by_tp2 += m.bytes;
  }
  EXPECT_GT(forwarded_by_tp2, 0);
  EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
  EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
}

// A small replicated tensor is received whole by one engine rank of a
// host: under a TP4 trainer, one TP4 replica takes its quarters of "w"
// and "o" (1 KiB each) and one of its ranks also takes "n" (192 bytes)
// across hosts, 2240 bytes at 50 GB/s, which is both the plan's time and
// the bound (spreading "n" over the host's 4 ranks would say 42.3 ns).
TEST(RegionRelayTest, BoundTakesASmallReplicatedTensorWholeOnOneRank) {
  Layouts l = Make(4, {4}, /*fp8=*/false);
  absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
  const double entry = (2048 + 192) / 50e9;
  EXPECT_NEAR(plan->stats.lower_bound_seconds, entry, 1e-15);
  EXPECT_NEAR(plan->stats.predicted_seconds, entry, 1e-15);
}

// One engine's TP4 ranks and another's two TP2 replicas on one host,
// under 4 replicas of a TP2 trainer on another (16 layers), so that the
// engine host's network is what bounds the plan: a TP2 rank needs a half that
// two TP4 ranks hold a quarter each of. Every holder of a quarter takes
// part of it into the host, the TP4 ranks forward their quarters to the
// TP2 ranks, every byte lands (FP8 codes and scales too), and the plan is
// within 1.05x of the relay-aware bound (with only the halves' holders
// taking them in, a TP2 rank would take a quarter of the model across
// hosts: 1.7x the bound).
TEST(RegionRelayTest, QuarterHoldersCarryHalvesIntoTheirHost) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    Layouts l = Make(2, {4, 2, 2}, fp8, /*hosts=*/{1, 1, 1}, /*layers=*/16, /*trainer_dp=*/4);
    absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
    EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
    EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
    // The TP4 ranks (replica 0) forward to the TP2 ranks.
    int64_t tp4_to_tp2 = 0;
    for (const Message& m : plan->messages) {
      if (m.relay && l.replica_of[m.src_rank] == 0 && l.replica_of[m.dst_rank] != 0) {
        tp4_to_tp2 += m.bytes;
      }
    }
    EXPECT_GT(tp4_to_tp2, 0);
    if (fp8) ExpectTrainersFp8Values(l, *plan);
  }
}

// Only some ranks of a host need what lives on another host: trainer
// ranks 0 and 1 on hosts 0 and 1, two TP2 replicas on each. On host 0 the
// replicas' second ranks need trainer rank 1's half, 4 KiB a layer over 8
// layers, which they alone can take in: the bound is at least half of it
// over the network per rank (the other two ranks of the host take theirs
// from trainer rank 0 on their host, and hold nothing to carry), and the
// plan is within 1.05x of it.
TEST(RegionRelayTest, BoundCountsOnlyTheHoldersOfWhatEntersAHost) {
  Layouts l = Make(2, {2, 2, 2, 2}, /*fp8=*/false, /*hosts=*/{0, 0, 1, 1}, /*layers=*/8);
  l.src.host_of_rank = {0, 1};
  absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, Options(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(testing::RunInWaveOrder(*plan), "");
  const double half_in = 8 * 4096 / 50e9;
  EXPECT_GE(plan->stats.lower_bound_seconds, half_in / 2);
  EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12));
  EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
}

// Relay options under a small random staging budget (256 B to 2 KiB) on
// 1 or 2 lanes, drawn from *rng in that order.
PlannerOptions SmallBudgetOptions(std::mt19937_64* rng) {
  PlannerOptions o = Options(true);
  o.staging_budget_bytes = int64_t{256} << ((*rng)() % 4);
  o.num_lanes = 1 + (*rng)() % 2;
  o.choose_lanes = false;
  return o;
}

// Checks that every byte of every replica of `plan` lands once and relays
// read only what earlier waves wrote (run in wave order), that sent and
// forwarded bytes add up to the plan's, that the bound is no more than
// the plan and that no engine rank stages more than `budget` bytes.
void ExpectEveryByteOnceAfterItArrives(const Plan& plan, int64_t budget) {
  EXPECT_EQ(testing::RunInWaveOrder(plan), "");
  EXPECT_EQ(Sum(plan.stats.bytes_sent) + Sum(plan.stats.bytes_forwarded), plan.stats.total_bytes);
  EXPECT_LE(plan.stats.lower_bound_seconds, plan.stats.predicted_seconds * (1 + 1e-12));
  for (int64_t st : plan.stats.staging_dst) EXPECT_LE(st, budget);
}

// Random mixes of TP1, TP2 and TP4 replicas under a TP1, TP2 or TP4
// trainer, bf16 or FP8, hosts known or not (sometimes shared with the
// trainer), small staging budgets: every byte of every replica lands once,
// relays read only what earlier waves wrote, and the bound holds.
TEST(RegionRelayTest, RandomMixedReplicasEveryByteOnceAfterItArrives) {
  std::mt19937_64 rng(4404);
  int sub = 0;
  for (int iter = 0; iter < 60; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    const int32_t tps[] = {1, 2, 4};
    std::vector<int32_t> replicas(2 + rng() % 4);
    std::vector<int32_t> hosts;
    const bool shared = rng() % 3 == 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      replicas[i] = tps[rng() % 3];
      hosts.push_back(shared && i == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 3));
    }
    Layouts l = Make(tps[rng() % 3], replicas, /*fp8=*/rng() % 2 == 0, hosts);
    if (rng() % 4 == 0) {
      l.src.host_of_rank.clear();
      l.dst.host_of_rank.clear();
    }
    const PlannerOptions o = SmallBudgetOptions(&rng);
    absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectEveryByteOnceAfterItArrives(*plan, o.staging_budget_bytes);
    sub += !SubRegionBytes(*plan).empty();
  }
  EXPECT_GT(sub, 15);  // the property is exercised
}

// Random mixes of TP1, TP2 and TP4 engines sharing one or two hosts under
// 2 or 4 replicas of a TP1, TP2 or TP4 trainer, 16 layers, bf16 or FP8,
// small staging budgets: where a first plan is over 1.05x its bound the
// planner plans again, on finer regions where the engines' regions nest
// (every holder of a region carries part of it in), counting each rank's
// bytes at their best link from the start; every byte of every replica
// lands once, after it arrives, the staging budget holds and the plan is
// within 1.05x of the bound. (With few layers a rank takes few units
// across hosts, and whole units can leave a plan just above: 2 of 600
// such mixes at 16 layers came out at 1.052, none of 400 at 64 layers.)
TEST(RegionRelayTest, RandomEnginesSharingHostsEveryByteOnceWithinTheBound) {
  std::mt19937_64 rng(4405);
  for (int iter = 0; iter < 40; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    const int32_t tps[] = {1, 2, 4};
    std::vector<int32_t> replicas(2 + rng() % 3);
    std::vector<int32_t> hosts;
    const int32_t two_hosts = static_cast<int32_t>(rng() % 2);
    for (size_t i = 0; i < replicas.size(); ++i) {
      replicas[i] = tps[rng() % 3];
      hosts.push_back(1 + (two_hosts ? static_cast<int32_t>(i % 2) : 0));
    }
    const int32_t trainer_tp = tps[rng() % 3];
    const bool fp8 = rng() % 2 == 0;
    const int32_t trainer_dp = 2 << (rng() % 2);
    Layouts l = Make(trainer_tp, replicas, fp8, hosts, /*layers=*/16, trainer_dp);
    const PlannerOptions o = SmallBudgetOptions(&rng);
    absl::StatusOr<Plan> plan = BuildPlan(l.src, l.dst, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectEveryByteOnceAfterItArrives(*plan, o.staging_budget_bytes);
    EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds);
    if (fp8) ExpectTrainersFp8Values(l, *plan);
  }
}

}  // namespace
}  // namespace refit
