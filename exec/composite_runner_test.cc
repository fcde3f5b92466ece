// A membership across two hosts in one round, each member's runner made by
// MakeMemberRunner (exec/member_runner.h): same-host pairs on the pull path
// (stood in by testing::HostPullRunner, memcpy between threads), the other
// pairs over the in-process transport connecting only the members with a
// network pair (SubsetTransport), composed into one CompositeRunner; every
// engine byte is checked against the test patterns.
#include "exec/composite_runner.h"

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "exec/transport/inproc_transport.h"
#include "exec/member_runner.h"
#include "exec/transport/pair_routes.h"
#include "exec/program/plan_side.h"
#include "exec/transport/subset_transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/plan_codec.h"
#include "testing/host_pull_runner.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

using testing::AllocateRankBuffers;
using testing::CheckRecords;
using testing::FillRecords;
using testing::HostPullRunner;
using testing::HostPullSource;
using testing::MakePatternPlan;

constexpr char kFill = static_cast<char>(0xEE);
constexpr uint64_t kStep = 11;

// `side`'s buffers of `rank` in `full` (indexed like full), re-indexed like
// `slice`'s side.
std::vector<char*> SliceBuffers(const SideLayout& full, const SideLayout& slice,
                                int32_t rank, std::vector<std::vector<char>>& bufs) {
  std::map<std::string, char*> by_name;
  for (size_t b = 0; b < full.buffers.size(); ++b) {
    if (full.buffers[b].rank == rank) by_name[full.buffers[b].name] = bufs[b].data();
  }
  std::vector<char*> out(slice.buffers.size(), nullptr);
  for (size_t b = 0; b < slice.buffers.size(); ++b) {
    if (slice.buffers[b].rank != rank) continue;
    auto it = by_name.find(slice.buffers[b].name);
    if (it != by_name.end()) out[b] = it->second;
  }
  return out;
}

std::vector<std::pair<int32_t, int32_t>> Pairs(const Plan& plan) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (const Message& m : plan.messages) {
    pairs.emplace_back(m.src_rank, plan.src.world_size + m.dst_rank);
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  return pairs;
}

struct MixedResult {
  PairRoutes routes;
  std::vector<std::string> engine_checks;  // CheckRecords per engine rank
  std::vector<absl::Status> errors;        // per global rank
};

// Runs one round of `plan` with global rank g on host host_of_member[g].
MixedResult RunMixed(const Plan& plan, const std::vector<int32_t>& host_of_member) {
  MixedResult out;
  const int32_t ws = plan.src.world_size;
  const int32_t world = ws + plan.dst.world_size;
  out.routes = RoutePairs(Pairs(plan), host_of_member);
  const std::vector<int32_t>& net = out.routes.network_members;
  std::shared_ptr<InProcFabric> fabric;
  if (!net.empty()) {
    fabric = InProcFabric::Create(static_cast<int32_t>(net.size()), plan.options.num_lanes)
                 .value();
  }
  std::vector<Plan> slices(world);
  std::vector<std::vector<std::vector<char>>> mem(world);
  std::vector<std::vector<char*>> ptrs(world);
  std::map<int32_t, HostPullSource> sources;
  for (int32_t g = 0; g < world; ++g) {
    const bool src = g < ws;
    const int32_t r = src ? g : g - ws;
    const Side side = src ? Side::kTrainer : Side::kEngine;
    slices[g] = ExtractSlice(plan, side, r);
    const SideLayout& full = src ? plan.src : plan.dst;
    mem[g] = AllocateRankBuffers(full, r, src ? 0 : kFill);
    if (src) FillRecords(full, r, kStep, &mem[g]);
    ptrs[g] = SliceBuffers(full, src ? slices[g].src : slices[g].dst, r, mem[g]);
    if (src) sources[r] = HostPullSource{slices[g], ptrs[g]};
  }
  out.errors.assign(world, absl::OkStatus());
  std::vector<std::thread> threads;
  for (int32_t g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      const bool src = g < ws;
      MemberSlice m;
      m.plan = &slices[g];
      m.side = src ? Side::kTrainer : Side::kEngine;
      m.rank = src ? g : g - ws;
      m.buffers = ptrs[g];
      m.global_rank = g;
      m.global_world = world;
      m.num_lanes = plan.options.num_lanes;
      m.host_of_member = host_of_member;
      m.network_members = net;
      DataPlaneParts parts;
      // The network transport: among the network members only.
      parts.transport = [&](KvStore*, int32_t rank, int32_t n,
                            int32_t) -> absl::StatusOr<std::unique_ptr<Transport>> {
        if (n != static_cast<int32_t>(net.size())) {
          return absl::InternalError(absl::StrCat("transport of ", n, " members asked for"));
        }
        absl::StatusOr<std::unique_ptr<InProcTransport>> t = InProcTransport::Create(fabric, rank);
        if (!t.ok()) return t.status();
        return std::unique_ptr<Transport>(std::move(*t));
      };
      parts.pull = [&](const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
                       KvStore*, std::function<bool(int32_t)> pull_peer,
                       absl::Time) -> absl::StatusOr<std::unique_ptr<RoundRunner>> {
        if (!pull_peer) return absl::InternalError("no hosts given to the pull runner");
        absl::StatusOr<std::unique_ptr<HostPullRunner>> p =
            side == Side::kTrainer
                ? HostPullRunner::CreateSender(slice, rank, pull_peer)
                : HostPullRunner::CreateReceiver(slice, rank, buffers, sources, pull_peer);
        if (!p.ok()) return p.status();
        return std::unique_ptr<RoundRunner>(std::move(*p));
      };
      absl::StatusOr<std::unique_ptr<RoundRunner>> runner =
          MakeMemberRunner(m, parts, nullptr, absl::Now() + absl::Seconds(20));
      if (!runner.ok()) {
        out.errors[g] = runner.status();
        return;
      }
      out.errors[g] = (*runner)->Run(absl::Now() + absl::Seconds(20)).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int32_t d = 0; d < plan.dst.world_size; ++d) {
    out.engine_checks.push_back(CheckRecords(plan.dst, d, kStep, kFill, mem[ws + d]));
  }
  return out;
}

TEST(CompositeRunnerTest, TwoHostsPullSameHostPairsAndSendTheRest) {
  int64_t mixed = 0;  // patterns with pairs of both kinds
  for (const std::string& name : testing::PatternNames()) {
    // Relays run on the executor alone: refitd plans a membership that
    // pulls without them.
    if (name == "relay") continue;
    SCOPED_TRACE(name);
    absl::StatusOr<Plan> plan = MakePatternPlan(name);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const int32_t world = plan->src.world_size + plan->dst.world_size;
    std::vector<int32_t> host(world);
    for (int32_t t = 0; t < plan->src.world_size; ++t) host[t] = t % 2;
    for (int32_t d = 0; d < plan->dst.world_size; ++d) {
      host[plan->src.world_size + d] = (d + 1) % 2;
    }
    MixedResult r = RunMixed(*plan, host);
    for (int32_t g = 0; g < world; ++g) EXPECT_TRUE(r.errors[g].ok()) << g << ": " << r.errors[g];
    for (const std::string& c : r.engine_checks) EXPECT_EQ(c, "");
    if (r.routes.pull_pairs > 0 && r.routes.network_pairs > 0) ++mixed;
  }
  EXPECT_GT(mixed, 0);
}

TEST(CompositeRunnerTest, OneHostPullsEverythingAndAllHostsApartSendEverything) {
  absl::StatusOr<Plan> plan = MakePatternPlan("2to2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int32_t world = plan->src.world_size + plan->dst.world_size;
  MixedResult one = RunMixed(*plan, std::vector<int32_t>(world, 0));
  EXPECT_EQ(one.routes.network_pairs, 0);
  EXPECT_TRUE(one.routes.network_members.empty());
  for (const std::string& c : one.engine_checks) EXPECT_EQ(c, "");
  std::vector<int32_t> apart(world);
  for (int32_t g = 0; g < world; ++g) apart[g] = g;
  MixedResult all = RunMixed(*plan, apart);
  EXPECT_EQ(all.routes.pull_pairs, 0);
  EXPECT_EQ(static_cast<int32_t>(all.routes.network_members.size()), world);
  for (const std::string& c : all.engine_checks) EXPECT_EQ(c, "");
}

// Waits until cancelled or the deadline.
class WaitingRunner : public RoundRunner {
 public:
  void Begin(const RoundStart&) override {}
  void Finish(RoundOutcome) override {}
  absl::StatusOr<RunStats> Run(absl::Time deadline) override {
    if (cancelled_.WaitForNotificationWithDeadline(deadline)) return reason_;
    return absl::DeadlineExceededError("waited");
  }
  void Cancel(const absl::Status& reason) override {
    reason_ = reason;
    cancelled_.Notify();
  }

 private:
  absl::Status reason_;
  absl::Notification cancelled_;
};

class FailingRunner : public RoundRunner {
 public:
  void Begin(const RoundStart&) override {}
  void Finish(RoundOutcome) override {}
  absl::StatusOr<RunStats> Run(absl::Time) override {
    return absl::UnavailableError("trainer rank 1 died");
  }
  void Cancel(const absl::Status&) override {}
};

TEST(CompositeRunnerTest, AFailingPartCancelsTheOthersAtOnce) {
  std::vector<std::unique_ptr<RoundRunner>> parts;
  parts.push_back(std::make_unique<WaitingRunner>());
  parts.push_back(std::make_unique<FailingRunner>());
  auto c = CompositeRunner::Create(std::move(parts));
  ASSERT_TRUE(c.ok()) << c.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<RunStats> s = (*c)->Run(start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("trainer rank 1 died"), std::string::npos);
}

// Returns fixed figures; notes the round begun and its outcome.
class FixedRunner : public RoundRunner {
 public:
  explicit FixedRunner(RunStats stats, std::vector<std::string>* log = nullptr)
      : stats_(stats), log_(log) {}
  void Begin(const RoundStart& round) override {
    if (log_ != nullptr) {
      log_->push_back(absl::StrCat("begin ", round.version, round.digest ? " digest" : ""));
    }
  }
  absl::StatusOr<RunStats> Run(absl::Time) override { return stats_; }
  void Finish(RoundOutcome outcome) override {
    if (log_ != nullptr) {
      log_->push_back(outcome == RoundOutcome::kCommitted ? "committed" : "aborted");
    }
  }
  void Cancel(const absl::Status&) override {}

 private:
  RunStats stats_;
  std::vector<std::string>* log_;
};

TEST(CompositeRunnerTest, EveryPartSeesTheRoundsLifecycleAndDigestPartsAdd) {
  RunStats a, b;
  a.digests[{0, 1}] = 5;
  a.delta_messages = 2;
  b.digests[{0, 1}] = 7;
  b.digests[{1, 0}] = 3;
  b.dense_messages = 1;
  std::vector<std::string> log_a, log_b;
  std::vector<std::unique_ptr<RoundRunner>> parts;
  parts.push_back(std::make_unique<FixedRunner>(a, &log_a));
  parts.push_back(std::make_unique<FixedRunner>(b, &log_b));
  auto c = CompositeRunner::Create(std::move(parts));
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Begin({4, {3, -1}, true});
  absl::StatusOr<RunStats> s = (*c)->Run(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  (*c)->Finish(RoundOutcome::kCommitted);
  (*c)->Begin({5, {}, false});
  (*c)->Finish(RoundOutcome::kAborted);
  const std::vector<std::string> want = {"begin 4 digest", "committed", "begin 5", "aborted"};
  EXPECT_EQ(log_a, want);
  EXPECT_EQ(log_b, want);
  // Sums mod 2^64 per (engine rank, tensor): each part digested its pairs.
  EXPECT_EQ(s->digests, (DigestSums{{{0, 1}, 12}, {{1, 0}, 3}}));
  EXPECT_EQ(s->delta_messages, 2);
  EXPECT_EQ(s->dense_messages, 1);
}

TEST(CompositeRunnerTest, AddsThePartsStagingAndBytesAndTakesTheLongestTime) {
  std::vector<std::unique_ptr<RoundRunner>> parts;
  parts.push_back(std::make_unique<FixedRunner>(RunStats{100, 0, 1, 0.5, 0}));
  parts.push_back(std::make_unique<FixedRunner>(RunStats{50, 10, 3, 0.25, 4096}));
  parts.push_back(std::make_unique<FixedRunner>(RunStats{0, 0, 1, 0.75, 1024}));
  auto c = CompositeRunner::Create(std::move(parts));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<RunStats> s = (*c)->Run(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->bytes_sent, 150);
  EXPECT_EQ(s->bytes_received, 10);
  EXPECT_EQ(s->waves, 5);
  EXPECT_DOUBLE_EQ(s->seconds, 0.75);
  EXPECT_EQ(s->peak_staging_bytes, 5120);
}

TEST(CompositeRunnerTest, RejectsNoParts) {
  EXPECT_TRUE(absl::IsInvalidArgument(CompositeRunner::Create({}).status()));
}

TEST(SubsetTransportTest, MapsGlobalRanksAndRefusesOthers) {
  auto fabric = InProcFabric::Create(2, 1).value();
  auto a = SubsetTransport::Create(InProcTransport::Create(fabric, 0).value(), {1, 4}, 6);
  auto b = SubsetTransport::Create(InProcTransport::Create(fabric, 1).value(), {1, 4}, 6);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->rank(), 1);
  EXPECT_EQ((*b)->rank(), 4);
  EXPECT_EQ((*a)->world_size(), 6);
  char in[4] = {1, 2, 3, 4}, got[4] = {};
  const absl::Time d = absl::Now() + absl::Seconds(10);
  SendOp s{4, in, 4};
  RecvOp r{1, got, 4};
  ASSERT_TRUE((*a)->StartWave(0, {&s, 1}, {}, d).ok());
  ASSERT_TRUE((*b)->StartWave(0, {}, {&r, 1}, d).ok());
  ASSERT_TRUE((*a)->WaitWave(0, d).ok());
  ASSERT_TRUE((*b)->WaitWave(0, d).ok());
  EXPECT_EQ(std::string(got, 4), std::string(in, 4));
  // A peer that died is named with its global rank too.
  fabric->Kill(1);
  SendOp again{4, in, 4};
  ASSERT_TRUE((*a)->StartWave(0, {&again, 1}, {}, d).ok());
  absl::Status dead = (*a)->WaitWave(0, d);
  EXPECT_FALSE(dead.ok());
  EXPECT_NE(dead.message().find("as global ranks: 0=1, 1=4"), std::string::npos) << dead;
  SendOp bad{2, in, 4};
  EXPECT_TRUE(absl::IsInvalidArgument((*a)->StartWave(0, {&bad, 1}, {}, d)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SubsetTransport::Create(InProcTransport::Create(fabric, 0).value(), {4, 1}, 6)
          .status()));
}

TEST(PairRoutesTest, SameHostPairsPullAndTheOthersJoinTheNetwork) {
  // Trainers 0,1 on hosts 0,1; engines 2,3 on hosts 0,1.
  const PairRoutes r = RoutePairs({{0, 2}, {0, 3}, {1, 3}}, {0, 1, 0, 1});
  EXPECT_EQ(r.pull_pairs, 2);
  EXPECT_EQ(r.network_pairs, 1);
  EXPECT_EQ(r.network_members, (std::vector<int32_t>{0, 3}));
  EXPECT_FALSE(PullsBetween({0, 1}, 0, 5));
  // No hosts: nothing pulls.
  EXPECT_EQ(RoutePairs({{0, 1}}, {}).network_pairs, 1);
}

TEST(MemberRunnerTest, RelaysOnPulledPairsAreRefusedByName) {
  absl::StatusOr<Plan> plan = MakePatternPlan("relay");
  ASSERT_TRUE(plan.ok()) << plan.status();
  int32_t refused = 0;
  for (int32_t e = 0; e < plan->dst.world_size; ++e) {
    Plan slice = ExtractSlice(*plan, Side::kEngine, e);
    const bool relays = std::any_of(slice.messages.begin(), slice.messages.end(),
                                    [](const Message& m) { return m.relay; });
    MemberSlice m;
    m.plan = &slice;
    m.side = Side::kEngine;
    m.rank = e;
    m.global_rank = plan->src.world_size + e;
    m.global_world = plan->src.world_size + plan->dst.world_size;
    DataPlaneParts parts;  // every pair pulled (no hosts)
    bool pulled = false;
    parts.pull = [&](const Plan&, Side, int32_t, std::vector<char*>, KvStore*,
                     std::function<bool(int32_t)>,
                     absl::Time) -> absl::StatusOr<std::unique_ptr<RoundRunner>> {
      pulled = true;
      return absl::InternalError("the pull factory must not be reached");
    };
    absl::StatusOr<std::unique_ptr<RoundRunner>> r =
        MakeMemberRunner(m, parts, nullptr, absl::Now() + absl::Seconds(5));
    if (!relays) continue;
    ++refused;
    EXPECT_FALSE(pulled) << "engine rank " << e;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("relays to engine rank"));
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("--relay=off"));
  }
  EXPECT_GT(refused, 0);
}

TEST(MemberRunnerTest, MissingPlanOrTransportIsNamed) {
  DataPlaneParts parts;
  MemberSlice m;
  absl::StatusOr<std::unique_ptr<RoundRunner>> r = MakeMemberRunner(m, parts, nullptr, absl::Now());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("no plan"));
  Plan plan;
  m.plan = &plan;
  r = MakeMemberRunner(m, parts, nullptr, absl::Now());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("no transport factory"));
}

}  // namespace
}  // namespace refit
