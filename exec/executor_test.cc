// In-process executor tests: every rank is a thread over InProcTransport.
#include "exec/executor.h"

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "absl/synchronization/mutex.h"
#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"
#include "testing/counting_copier.h"
#include "testing/reference_copy.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

using testing::AllocateRankBuffers;
using testing::CheckRecords;
using testing::FillRecords;
using testing::MakePatternPlan;
using testing::Pointers;

constexpr char kFill = static_cast<char>(0xEE);

// A transport that flips one byte of the first message received on lane 0
// (from global rank `from`, when given).
class CorruptingTransport : public Transport {
 public:
  explicit CorruptingTransport(std::unique_ptr<Transport> t, int32_t from = -1)
      : t_(std::move(t)), from_(from) {}
  int32_t rank() const override { return t_->rank(); }
  int32_t world_size() const override { return t_->world_size(); }
  int32_t num_lanes() const override { return t_->num_lanes(); }
  MemoryKind memory_kind() const override { return t_->memory_kind(); }
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> s,
                          absl::Span<const RecvOp> r, absl::Time deadline) override {
    for (const RecvOp& op : r) {
      if (done_ || lane != 0 || target_.ptr != nullptr || op.bytes == 0) break;
      if (from_ < 0 || op.peer == from_) target_ = op;
    }
    return t_->StartWave(lane, s, r, deadline);
  }
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override {
    absl::Status s = t_->WaitWave(lane, deadline);
    if (s.ok() && lane == 0 && target_.ptr != nullptr && !done_) {
      static_cast<char*>(target_.ptr)[0] ^= 0x5A;
      done_ = true;
    }
    return s;
  }

 private:
  std::unique_ptr<Transport> t_;
  int32_t from_;
  RecvOp target_;
  bool done_ = false;
};

struct RankResult {
  absl::Status status;
  std::string check;
  RunStats stats;
  int64_t allocated_peak = 0;  // the most the copier had handed out
};

// Runs `steps` steps of `plan` with one thread per global rank. Ranks in
// `absent` never run; rank `corrupt` (global) gets a corrupting transport.
std::vector<RankResult> RunAll(const Plan& plan, int lanes, int steps,
                               bool verify, std::set<int> absent = {},
                               int corrupt = -1,
                               absl::Duration timeout = absl::Seconds(20),
                               int corrupt_from = -1) {
  const int ws = plan.src.world_size, wd = plan.dst.world_size;
  auto fabric = InProcFabric::Create(ws + wd, lanes).value();
  std::vector<RankResult> results(ws + wd);
  std::vector<std::thread> threads;
  for (int g = 0; g < ws + wd; ++g) {
    if (absent.count(g)) continue;
    threads.emplace_back([&, g] {
      RankResult& res = results[g];
      const Side side = g < ws ? Side::kTrainer : Side::kEngine;
      const int rank = g < ws ? g : g - ws;
      const SideLayout& layout = g < ws ? plan.src : plan.dst;
      std::unique_ptr<Transport> t = InProcTransport::Create(fabric, g).value();
      if (g == corrupt) t = std::make_unique<CorruptingTransport>(std::move(t), corrupt_from);
      auto bufs = AllocateRankBuffers(layout, rank, kFill);
      std::vector<char*> before = Pointers(bufs);
      testing::CountingCopier engine;
      ExecutorOptions opt;
      opt.segment_checksums = verify;
      opt.copier = &engine;
      auto ex = Executor::Create(plan, side, rank, before, t.get(), opt);
      if (!ex.ok()) {
        res.status = ex.status();
        return;
      }
      for (int step = 1; step <= steps; ++step) {
        if (side == Side::kTrainer) FillRecords(layout, rank, step, &bufs);
        auto st = (*ex)->Run(absl::Now() + timeout);
        if (!st.ok()) {
          res.status = st.status();
          fabric->Kill(g);
          return;
        }
        res.stats = *st;
        res.allocated_peak = engine.peak_bytes();
        if (side == Side::kEngine) {
          std::string c = CheckRecords(layout, rank, step, kFill, bufs);
          if (!c.empty()) {
            res.check = absl::StrCat("step ", step, ": ", c);
            return;
          }
        }
      }
      if (Pointers(bufs) != before) res.check = "buffer pointers changed";
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

class PatternTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PatternTest, BytesEqualAfterTwoStepsOnEveryRank) {
  for (int lanes : {1, 2}) {
    auto plan = MakePatternPlan(GetParam(), lanes, 2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto res = RunAll(*plan, lanes, 2, /*verify=*/true);
    int64_t sent = 0, received = 0;
    for (size_t g = 0; g < res.size(); ++g) {
      EXPECT_TRUE(res[g].status.ok()) << "rank " << g << ": " << res[g].status;
      EXPECT_EQ(res[g].check, "") << "global rank " << g;
      sent += res[g].stats.bytes_sent;
      received += res[g].stats.bytes_received;
    }
    int64_t total = 0;
    for (const Message& m : plan->messages) total += m.bytes;
    EXPECT_EQ(sent, total);
    EXPECT_EQ(received, total);
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, PatternTest,
                         ::testing::ValuesIn(testing::PatternNames()));

// Adds tensors `ts` to both sides.
absl::Status AddTensors(const std::vector<TensorSpec>& ts, SideLayout* src, SideLayout* dst) {
  for (const TensorSpec& t : ts) {
    REFIT_RETURN_IF_ERROR(AddTensor(*src, t).status());
    REFIT_RETURN_IF_ERROR(AddTensor(*dst, t).status());
  }
  return absl::OkStatus();
}

// Plans with relays on `lanes` lanes of `lane_budget` staging bytes each.
absl::StatusOr<Plan> RelayPlanOf(SideLayout src, SideLayout dst, int32_t lanes,
                                 int64_t lane_budget) {
  PlannerOptions o;
  o.relay = true;
  o.num_lanes = lanes;
  o.choose_lanes = false;
  o.staging_budget_bytes = lane_budget * lanes;
  return BuildPlan(std::move(src), std::move(dst), o);
}

// Two trainer ranks (TP 2, host 0) feeding three engine replicas (TP 2
// over the other dim, one host each) with relays, under a small staging
// budget (many waves).
absl::StatusOr<Plan> RelayPlan(int32_t lanes) {
  SideLayout src, dst;
  src.world_size = 2;
  dst.world_size = 6;
  REFIT_RETURN_IF_ERROR(
      AddTensors({{"a", {8, 6}, DType::kBF16}, {"b", {5}, DType::kF32}}, &src, &dst));
  const Mesh ms = *Mesh::Make({"tp"}, {2}, {0, 1});
  REFIT_RETURN_IF_ERROR(AddDenseShards(src, 0, ms, {Placement::Shard(0)}).status());
  REFIT_RETURN_IF_ERROR(AddDenseShards(src, 1, ms, {Placement::Replicate()}).status());
  for (int32_t r = 0; r < 3; ++r) {
    const Mesh me = *Mesh::Make({"tp"}, {2}, {2 * r, 2 * r + 1});
    REFIT_RETURN_IF_ERROR(AddDenseShards(dst, 0, me, {Placement::Shard(1)}).status());
    REFIT_RETURN_IF_ERROR(AddDenseShards(dst, 1, me, {Placement::Replicate()}).status());
  }
  src.host_of_rank = {0, 0};
  dst.host_of_rank = {1, 1, 2, 2, 3, 3};
  return RelayPlanOf(std::move(src), std::move(dst), lanes, 64);
}

// Returns the plan's first relay message, or null.
const Message* FirstRelay(const Plan& plan) {
  for (const Message& m : plan.messages) {
    if (m.relay) return &m;
  }
  return nullptr;
}

// A TP2 trainer (host 0) feeding a TP2 replica (host 1) and two TP4
// replicas (hosts 2, 3) of bf16 "w" [32, 16] (column parallel) and "o"
// [16, 32] (row parallel), with relays: the TP2 replica forwards the TP4
// ones quarters of the halves it received (sub-regions).
absl::StatusOr<Plan> SubRegionRelayPlan(int32_t lanes) {
  SideLayout src, dst;
  src.world_size = 2;
  REFIT_RETURN_IF_ERROR(
      AddTensors({{"w", {32, 16}, DType::kBF16}, {"o", {16, 32}, DType::kBF16}}, &src, &dst));
  const Mesh ms = *Mesh::Make({"tp"}, {2}, {0, 1});
  REFIT_RETURN_IF_ERROR(AddDenseShards(src, 0, ms, {Placement::Shard(0)}).status());
  REFIT_RETURN_IF_ERROR(AddDenseShards(src, 1, ms, {Placement::Shard(1)}).status());
  src.host_of_rank = {0, 0};
  int32_t host = 1;
  for (int32_t tp : {2, 4, 4}) {
    std::vector<int32_t> ranks;
    for (int32_t k = 0; k < tp; ++k) ranks.push_back(dst.world_size + k);
    dst.world_size += tp;
    dst.host_of_rank.insert(dst.host_of_rank.end(), tp, host++);
    const Mesh me = *Mesh::Make({"tp"}, {tp}, ranks);
    REFIT_RETURN_IF_ERROR(
        AddDenseShards(dst, 0, me, {Placement::Shard(0)}, absl::StrCat("w", tp, "@", ranks[0]))
            .status());
    REFIT_RETURN_IF_ERROR(
        AddDenseShards(dst, 1, me, {Placement::Shard(1)}, absl::StrCat("o", tp, "@", ranks[0]))
            .status());
  }
  return RelayPlanOf(std::move(src), std::move(dst), lanes, 256);
}

// Replicas of one layout (RelayPlan), and a TP2 replica forwarding TP4
// replicas sub-regions of what it received (SubRegionRelayPlan): every
// byte of every replica right, each runner within the staging budget.
TEST(ExecutorTest, RelaysForwardFromTheEnginesOwnBuffersEveryByteChecked) {
  for (auto* make : {&RelayPlan, &SubRegionRelayPlan}) {
    for (int lanes : {1, 2}) {
      for (bool verify : {false, true}) {
        SCOPED_TRACE(absl::StrCat(make == &RelayPlan ? "one layout, " : "sub-regions, ", lanes,
                                  " lanes, verify ", verify));
        absl::StatusOr<Plan> plan = make(lanes);
        ASSERT_TRUE(plan.ok()) << plan.status();
        int64_t forwarded = 0;
        for (int64_t b : plan->stats.bytes_forwarded) forwarded += b;
        ASSERT_GT(forwarded, 0);
        auto res = RunAll(*plan, lanes, 2, verify);
        int64_t sent = 0;
        for (size_t g = 0; g < res.size(); ++g) {
          EXPECT_TRUE(res[g].status.ok()) << "rank " << g << ": " << res[g].status;
          EXPECT_EQ(res[g].check, "") << "global rank " << g;
          EXPECT_LE(res[g].allocated_peak, plan->options.staging_budget_bytes) << "rank " << g;
          sent += res[g].stats.bytes_sent;
        }
        EXPECT_EQ(sent, plan->stats.total_bytes);  // trainer sends and relays
      }
    }
  }
}

TEST(ExecutorTest, SubRegionRelayPlanForwardsSubRegions) {
  absl::StatusOr<Plan> plan = SubRegionRelayPlan(1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t sub = 0;
  for (const Message& m : plan->messages) {
    for (int32_t i = m.first_segment; m.relay && i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan->segments[i];
      const Box& held = plan->dst.records[s.src_record].box;
      if (m.src_rank < 2 && !(held == s.box) && Contains(held, s.box)) sub += s.bytes;
    }
  }
  EXPECT_GT(sub, 0) << "the TP2 replica forwards no sub-region";
}

TEST(ExecutorTest, VerifyNamesTheRelayThatSentCorruptBytes) {
  absl::StatusOr<Plan> plan = RelayPlan(1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The first relay's bytes are corrupted on arrival.
  const Message* relay = FirstRelay(*plan);
  ASSERT_NE(relay, nullptr);
  const int32_t ws = plan->src.world_size;
  auto res = RunAll(*plan, 1, 1, true, {}, ws + relay->dst_rank, absl::Seconds(20),
                    ws + relay->src_rank);
  const absl::Status& st = res[ws + relay->dst_rank].status;
  ASSERT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(absl::StrCat("engine rank ", relay->src_rank, " (relay) sent")),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find(absl::StrCat("engine rank ", relay->dst_rank, " wrote")),
            std::string::npos)
      << st;
}

TEST(ExecutorTest, MissingRelayFailsItsDownstreamWithinDeadlineNamingIt) {
  absl::StatusOr<Plan> plan = RelayPlan(2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Message* relay = FirstRelay(*plan);
  ASSERT_NE(relay, nullptr);
  const int32_t ws = plan->src.world_size;
  const int dead = ws + relay->src_rank;
  const absl::Time start = absl::Now();
  auto res = RunAll(*plan, 2, 1, false, {dead}, -1, absl::Milliseconds(500));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const absl::Status& st = res[ws + relay->dst_rank].status;
  EXPECT_FALSE(st.ok());
  // The transport names the relay (global rank) it still waits for.
  EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("rank ", dead)) ||
              absl::StrContains(st.message(), absl::StrCat("rank(s) ", dead)))
      << st;
}

TEST(ExecutorTest, PpStagesGoToSeparateLanes) {
  auto plan = MakePatternPlan("pp", 2, 1);
  ASSERT_TRUE(plan.ok());
  std::set<int> lanes_of_stage[2];
  for (const Wave& r : plan->waves) lanes_of_stage[r.stage].insert(r.lane);
  EXPECT_EQ(lanes_of_stage[0], std::set<int>{0});
  EXPECT_EQ(lanes_of_stage[1], std::set<int>{1});
  for (const auto& r : RunAll(*plan, 2, 1, false)) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.check, "");
  }
}

TEST(ExecutorTest, MissingPeerFailsWithinDeadlineNamingIt) {
  auto plan = MakePatternPlan("2to2", 2, 2);
  ASSERT_TRUE(plan.ok());
  const absl::Time start = absl::Now();
  // Engine rank 1 (global 3) never shows up.
  auto res = RunAll(*plan, 2, 1, false, {3}, -1, absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(3));
  bool named = false;
  for (int g : {0, 1}) {
    EXPECT_FALSE(res[g].status.ok()) << "rank " << g;
    if (res[g].status.message().find("3") != std::string::npos) named = true;
  }
  EXPECT_TRUE(named);
}

TEST(ExecutorTest, KilledPeerAbortsOthers) {
  auto plan = MakePatternPlan("1to3", 1, 1);
  ASSERT_TRUE(plan.ok());
  auto fabric = InProcFabric::Create(4, 1).value();
  fabric->Kill(0);  // the only trainer rank is dead
  auto t = InProcTransport::Create(fabric, 2).value();
  auto bufs = AllocateRankBuffers(plan->dst, 1, kFill);
  auto ex = Executor::Create(*plan, Side::kEngine, 1, Pointers(bufs),
                             t.get());
  ASSERT_TRUE(ex.ok()) << ex.status();
  auto st = (*ex)->Run(absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(st.status().message().find("peer rank 0"), std::string::npos)
      << st.status();
}

TEST(ExecutorTest, VerifyDetectsCorruptionAndNamesTensor) {
  auto plan = MakePatternPlan("2to2", 1, 1);
  ASSERT_TRUE(plan.ok());
  // Global rank 2 = engine rank 0.
  auto res = RunAll(*plan, 1, 1, true, {}, 2);
  ASSERT_FALSE(res[2].status.ok());
  EXPECT_EQ(res[2].status.code(), absl::StatusCode::kDataLoss)
      << res[2].status;
  EXPECT_NE(res[2].status.message().find("tensor layers.0"), std::string::npos)
      << res[2].status;
  EXPECT_NE(res[2].status.message().find("engine rank 0"), std::string::npos);
}

TEST(ExecutorTest, StagingAboveBudgetIsRefused) {
  auto plan = MakePatternPlan("qkv", 1, 1);
  ASSERT_TRUE(plan.ok());
  plan->options.staging_budget_bytes = 64;
  auto fabric = InProcFabric::Create(4, 1).value();
  auto t = InProcTransport::Create(fabric, 0).value();
  auto bufs = AllocateRankBuffers(plan->src, 0, kFill);
  auto ex = Executor::Create(*plan, Side::kTrainer, 0, Pointers(bufs),
                             t.get());
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ExecutorTest, StagingWithinBudgetAndZeroCopyForContiguous) {
  // 1to3 with one tensor per wave: row shards of row-major tensors are
  // contiguous on both sides.
  auto plan = MakePatternPlan("1to3", 2, 3);
  ASSERT_TRUE(plan.ok());
  for (const Message& m : plan->messages) {
    EXPECT_TRUE(m.src_contiguous && m.dst_contiguous);
  }
  auto res = RunAll(*plan, 2, 1, false);
  for (const auto& r : res) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.stats.peak_staging_bytes, 0);
    EXPECT_EQ(r.allocated_peak, 0);
  }
  // qkv needs staging (interleaved source), within the budget.
  auto qkv = MakePatternPlan("qkv", 2, 1);
  ASSERT_TRUE(qkv.ok());
  for (const auto& r : RunAll(*qkv, 2, 1, false)) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_LE(r.stats.peak_staging_bytes, qkv->options.staging_budget_bytes);
    // The reported peak is what the executor took from its copier.
    EXPECT_EQ(r.stats.peak_staging_bytes, r.allocated_peak);
  }
  EXPECT_GT(RunAll(*qkv, 2, 1, false)[0].stats.peak_staging_bytes, 0);
}

}  // namespace
}  // namespace refit

namespace refit {
namespace {

// NemotronH's A: the trainer holds A_log in bf16, the engine A = -exp(A_log)
// as an f32 parameter. After every step each engine rank holds -exp of that
// step's trainer values, computed by the sender, and the neighbour D byte
// for byte; verify passes (it hashes what travels).
TEST(ExecutorTest, SenderConvertsDtypeAndTransformEveryRun) {
  SideLayout src, dst;
  src.world_size = 1;
  dst.world_size = 2;
  for (const char* name : {"layers.0.mixer.A_log", "layers.0.mixer.D"}) {
    const bool a = absl::EndsWith(name, "A_log");
    TensorSpec t{name, {8}, a ? DType::kBF16 : DType::kF32};
    ASSERT_TRUE(AddTensor(src, t).ok());
    t.dtype = DType::kF32;
    if (a) t.transform = Transform::kNegExp;
    ASSERT_TRUE(AddTensor(dst, t).ok());
  }
  for (int32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(AddDenseShards(src, i, *Mesh::Make({"dp"}, {1}),
                               {Placement::Replicate()}).ok());
    ASSERT_TRUE(AddDenseShards(dst, i, *Mesh::Make({"tp"}, {2}),
                               {Placement::Shard(0)}).ok());
  }
  absl::StatusOr<Plan> plan = BuildPlan(src, dst, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->dst.tensors[0].transform, Transform::kNegExp);
  ASSERT_EQ(plan->conversions.size(), 1u);
  // One thread per rank; values from reference_copy's pattern (seed =
  // step), whose CheckPattern expects the transformed value for A_log.
  const int ws = plan->src.world_size, wd = plan->dst.world_size;
  auto fabric = InProcFabric::Create(ws + wd, 1).value();
  std::vector<absl::Status> status(ws + wd);
  std::vector<std::string> checks(ws + wd);
  std::vector<std::thread> threads;
  for (int g = 0; g < ws + wd; ++g) {
    threads.emplace_back([&, g] {
      const bool is_src = g < ws;
      const int rank = is_src ? g : g - ws;
      // Trainers fill their registered layout (the plan's converts A_log).
      const SideLayout& layout = is_src ? src : plan->dst;
      auto t = InProcTransport::Create(fabric, g).value();
      auto bufs = AllocateRankBuffers(layout, rank, kFill);
      HostBuffers host;
      for (char* p : Pointers(bufs)) host.push_back(reinterpret_cast<uint8_t*>(p));
      testing::CountingCopier engine;
      ExecutorOptions opt;
      opt.segment_checksums = true;
      opt.copier = &engine;
      auto ex = Executor::Create(*plan, is_src ? Side::kTrainer : Side::kEngine,
                                 rank, Pointers(bufs), t.get(), opt);
      if (!ex.ok()) {
        status[g] = ex.status();
        fabric->Kill(g);
        return;
      }
      const std::map<std::string, DType> source = SourceDTypes(src);
      for (uint64_t step = 1; step <= 2; ++step) {
        PatternOptions po{rank, step};
        po.source_dtypes = &source;
        if (is_src) FillPattern(layout, host, po);
        auto st = (*ex)->Run(absl::Now() + absl::Seconds(20));
        if (!st.ok()) {
          status[g] = st.status();
          fabric->Kill(g);
          return;
        }
        // The trainer holds the converted values (scratch) for the wave.
        if (is_src && st->peak_staging_bytes != engine.peak_bytes()) {
          checks[g] = absl::StrCat("peak staging ", st->peak_staging_bytes,
                                   ", allocated ", engine.peak_bytes());
        }
        if (is_src && st->peak_staging_bytes == 0) checks[g] = "no scratch reported";
        if (!is_src) {
          absl::Status c = CheckPattern(layout, host, po);
          if (!c.ok() && checks[g].empty()) {
            checks[g] = absl::StrCat("step ", step, ": ", c.message());
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int g = 0; g < ws + wd; ++g) {
    EXPECT_TRUE(status[g].ok()) << "rank " << g << ": " << status[g];
    EXPECT_EQ(checks[g], "") << "rank " << g;
  }
}

}  // namespace
}  // namespace refit
