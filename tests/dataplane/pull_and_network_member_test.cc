// Members through refitd, on CPU, as threads of this process. Across two
// hosts: refitd chooses each (trainer, engine) pair's data plane from the
// hosts members report; the members run the pull path for same-host pairs
// (stood in by testing::HostPullRunner, memcpy between threads) and Gloo
// for the pairs across hosts, in one round. Over Gloo alone: the peak
// staging each member reports is what its data plane allocated, and refitd
// shows the largest. Every engine byte is checked.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/member.h"
#include "exec/program/plan_side.h"
#include "gtest/gtest.h"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/counting_copier.h"
#include "testing/host_pull_runner.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

using testing::HostPullRunner;
using testing::HostPullSource;

// The trainers' slices and buffers as the engines' pull runners find them.
class Sources {
 public:
  void Put(int32_t rank, const Plan& slice, const std::vector<char*>& buffers) {
    absl::MutexLock l(&mu_);
    sources_[rank] = HostPullSource{slice, buffers};
  }
  // Waits until `n` trainer ranks put theirs; DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<std::map<int32_t, HostPullSource>> All(int32_t n, absl::Time deadline) {
    absl::MutexLock l(&mu_);
    auto full = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return static_cast<int32_t>(sources_.size()) >= n;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&full), deadline)) {
      return absl::DeadlineExceededError("trainer sources");
    }
    return sources_;
  }

 private:
  absl::Mutex mu_;
  std::map<int32_t, HostPullSource> sources_ ABSL_GUARDED_BY(mu_);
};

DataPlaneOptions PullAndNetworkDataPlane(Sources* sources) {
  DataPlaneOptions o;
  o.transport_kind = TransportKind::kPull;
  o.transport = GlooTransportFactory();
  o.pull = [sources](const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
                       KvStore*, std::function<bool(int32_t)> pull_peer,
                       absl::Time deadline) -> absl::StatusOr<std::unique_ptr<RoundRunner>> {
    if (!pull_peer) return absl::FailedPreconditionError("refitd sent no hosts");
    if (side == Side::kTrainer) {
      sources->Put(rank, slice, buffers);
      absl::StatusOr<std::unique_ptr<HostPullRunner>> r =
          HostPullRunner::CreateSender(slice, rank, pull_peer);
      if (!r.ok()) return r.status();
      return std::unique_ptr<RoundRunner>(std::move(*r));
    }
    absl::StatusOr<std::map<int32_t, HostPullSource>> all =
        sources->All(slice.src.world_size, deadline);
    if (!all.ok()) return all.status();
    absl::StatusOr<std::unique_ptr<HostPullRunner>> r =
        HostPullRunner::CreateReceiver(slice, rank, buffers, *all, pull_peer);
    if (!r.ok()) return r.status();
    return std::unique_ptr<RoundRunner>(std::move(*r));
  };
  return o;
}

struct Node {
  MemberOptions options;
  std::map<std::string, std::vector<char>> memory;
  std::unique_ptr<Member> member;
  RunStats stats;  // of the round
};

// Starts refitd (default plan function) for `min_engines` engines.
std::unique_ptr<RefitServer> StartRefitd(int min_engines) {
  RefitServer::Options so;
  so.coordinator.plan_function = DefaultPlanFunction({});
  so.coordinator.min_engines = min_engines;
  absl::StatusOr<std::unique_ptr<RefitServer>> server = RefitServer::Start(std::move(so));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Member options of tiny-llama's trainer rank `rank` or of engine `engine_id`.
MemberOptions Trainer(const RefitServer& server, int rank, const std::string& convention,
                      const std::string& host) {
  MemberOptions o;
  o.connection.target = absl::StrCat("127.0.0.1:", server.port());
  o.connection.rpc_timeout = absl::Seconds(10);
  o.model = "tiny-llama";
  o.side = Side::kTrainer;
  o.rank = rank;
  o.convention = convention;
  o.host_id = host;
  return o;
}
MemberOptions Engine(const RefitServer& server, const std::string& engine_id, int rank,
                     const std::string& convention, const std::string& host) {
  MemberOptions o = Trainer(server, rank, convention, host);
  o.side = Side::kEngine;
  o.engine_id = engine_id;
  return o;
}

// Joins every node with host buffers and the data plane `data_plane(i)`.
void JoinAll(std::vector<Node>& nodes, const std::function<DataPlaneOptions(size_t)>& data_plane,
             absl::Time deadline) {
  std::vector<testing::HostMember> joined(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) joined[i].options = nodes[i].options;
  const absl::Status s = testing::JoinHostMembers(joined, data_plane, deadline);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < nodes.size(); ++i) {  // moved: the buffers stay where they are
    nodes[i].memory = std::move(joined[i].memory);
    nodes[i].member = std::move(joined[i].member);
  }
}

// Runs round 1 on every node (node 0 is trainer rank 0 and starts it):
// trainers fill version 1's pattern, engines check it after the commit.
void RunRoundOne(std::vector<Node>& nodes, absl::Time deadline) {
  std::vector<absl::Status> errors(nodes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      Member& m = *nodes[i].member;
      const bool trainer = nodes[i].options.side == Side::kTrainer;
      absl::Status s = m.Prepare(deadline);
      if (s.ok() && trainer) s = testing::FillMemberPattern(m, 1);
      if (s.ok() && i == 0) s = m.StartRound(1, deadline);
      absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
      absl::StatusOr<RunStats> r = v.ok() ? m.RunRound(*v, deadline) : v.status();
      s = r.status();
      if (r.ok()) nodes[i].stats = *r;
      if (s.ok() && !trainer) s = testing::CheckMemberPattern(m, 1);
      errors[i] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < nodes.size(); ++i) EXPECT_TRUE(errors[i].ok()) << i << ": " << errors[i];
}

// Returns refitd's summary of the last finished round.
v1::RoundSummary LastRound(Node& node) {
  absl::StatusOr<v1::StatusResponse> st =
      node.member->client().GetStatus(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok() || st->rounds_size() == 0) return {};
  return st->rounds(st->rounds_size() - 1);
}

TEST(PullAndNetworkMemberTest, SameHostPairsPullAndPairsAcrossHostsUseGlooInOneRound) {
  std::unique_ptr<RefitServer> server = StartRefitd(2);
  ASSERT_NE(server, nullptr);
  // Trainer TP2 (rank r on host r); engine A (TP1) on host0, engine B
  // (TP1) on host1: each engine pulls one trainer rank's shards and gets
  // the other's over Gloo.
  std::vector<Node> nodes(4);
  nodes[0].options = Trainer(*server, 0, "megatron:tp=2", "host0");
  nodes[1].options = Trainer(*server, 1, "megatron:tp=2", "host1");
  nodes[2].options = Engine(*server, "A", 0, "vllm:tp=1", "host0");
  nodes[3].options = Engine(*server, "B", 0, "vllm:tp=1", "host1");
  Sources sources;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  JoinAll(nodes, [&](size_t) { return PullAndNetworkDataPlane(&sources); }, deadline);
  RunRoundOne(nodes, deadline);
  absl::StatusOr<v1::StatusResponse> st =
      nodes[0].member->client().GetStatus(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pull_pairs(), 2);
  EXPECT_EQ(st->network_pairs(), 2);
}

TEST(StagingReportTest, EachMemberReportsTheStagingItsDataPlaneAllocated) {
  std::unique_ptr<RefitServer> server = StartRefitd(1);
  ASSERT_NE(server, nullptr);
  // Trainer TP2 into an engine TP1 over Gloo: the engine gathers both
  // trainer ranks' column shards into its fused tensors (staged).
  std::vector<Node> nodes(3);
  nodes[0].options = Trainer(*server, 0, "megatron:tp=2", "host0");
  nodes[1].options = Trainer(*server, 1, "megatron:tp=2", "host1");
  nodes[2].options = Engine(*server, "A", 0, "vllm:tp=1", "host2");
  std::vector<testing::CountingCopier*> engines(nodes.size(), nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  JoinAll(nodes, [&](size_t i) {
    DataPlaneOptions o;
    o.copier = [&engines, i](Transport*) -> std::unique_ptr<Copier> {
      auto e = std::make_unique<testing::CountingCopier>();
      engines[i] = e.get();
      return e;
    };
    return o;
  }, deadline);
  RunRoundOne(nodes, deadline);
  int64_t largest = 0;
  std::string largest_member;
  for (size_t i = 0; i < nodes.size(); ++i) {
    ASSERT_NE(engines[i], nullptr) << i;
    EXPECT_EQ(nodes[i].stats.peak_staging_bytes, engines[i]->peak_bytes()) << i;
    if (nodes[i].stats.peak_staging_bytes > largest) {
      largest = nodes[i].stats.peak_staging_bytes;
      largest_member = nodes[i].member->client().member_id();
    }
  }
  EXPECT_GT(largest, 0);
  const v1::RoundSummary last = LastRound(nodes[0]);
  EXPECT_EQ(last.outcome(), "committed");
  EXPECT_EQ(last.peak_staging_bytes(), largest);
  EXPECT_EQ(last.peak_staging_member(), largest_member);
  // The metric has no member label (refit status names the member).
  EXPECT_NE(server->MetricsText().find(
                absl::StrCat("\nrefit_last_round_peak_staging_bytes ", largest, "\n")),
            std::string::npos)
      << server->MetricsText();
}

TEST(StagingReportTest, APullRoundReportsNoStaging) {
  std::unique_ptr<RefitServer> server = StartRefitd(1);
  ASSERT_NE(server, nullptr);
  // Every member on one host: every pair pulls, in place.
  std::vector<Node> nodes(3);
  nodes[0].options = Trainer(*server, 0, "megatron:tp=2", "host0");
  nodes[1].options = Trainer(*server, 1, "megatron:tp=2", "host0");
  nodes[2].options = Engine(*server, "A", 0, "vllm:tp=1", "host0");
  Sources sources;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  JoinAll(nodes, [&](size_t) { return PullAndNetworkDataPlane(&sources); }, deadline);
  RunRoundOne(nodes, deadline);
  for (const Node& n : nodes) EXPECT_EQ(n.stats.peak_staging_bytes, 0);
  const v1::RoundSummary last = LastRound(nodes[0]);
  EXPECT_EQ(last.outcome(), "committed");
  EXPECT_GT(last.bytes(), 0);
  EXPECT_EQ(last.peak_staging_bytes(), 0);
}

}  // namespace
}  // namespace refit
