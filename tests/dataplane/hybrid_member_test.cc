// Members across two hosts through refitd, on CPU: refitd chooses each
// (trainer, engine) pair's data plane from the hosts members report; the
// members run the pull path for same-host pairs (stood in by
// testing::HostPullRunner, memcpy between threads of this process) and Gloo
// for the pairs across hosts, in one round. Every engine byte is checked.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/member.h"
#include "exec/plan_side.h"
#include "gtest/gtest.h"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/host_pull_runner.h"
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

DataPlaneOptions HybridDataPlane(Sources* sources) {
  DataPlaneOptions o;
  o.transport_kind = TransportKind::kIpc;
  o.transport = GlooTransportFactory();
  o.runner = [sources](const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
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
};

TEST(HybridMemberTest, SameHostPairsPullAndPairsAcrossHostsUseGlooInOneRound) {
  RefitServer::Options so;
  so.plan_function = DefaultPlanFunction({});
  so.min_engines = 2;
  absl::StatusOr<std::unique_ptr<RefitServer>> server = RefitServer::Start(std::move(so));
  ASSERT_TRUE(server.ok()) << server.status();
  // Trainer TP2 (rank r on host r); engine A (TP1) on host0, engine B
  // (TP1) on host1: each engine pulls one trainer rank's shards and gets
  // the other's over Gloo.
  std::vector<Node> nodes(4);
  for (int i = 0; i < 4; ++i) {
    MemberOptions& o = nodes[i].options;
    o.connection.target = absl::StrCat("127.0.0.1:", (*server)->port());
    o.connection.rpc_timeout = absl::Seconds(10);
    o.model = "tiny-llama";
    if (i < 2) {
      o.side = Side::kTrainer;
      o.rank = i;
      o.convention = "megatron:tp=2";
      o.host_id = absl::StrCat("host", i);
    } else {
      o.side = Side::kEngine;
      o.engine_id = i == 2 ? "A" : "B";
      o.convention = "vllm:tp=1";
      o.host_id = i == 2 ? "host0" : "host1";
    }
  }
  Sources sources;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (Node& n : nodes) {
    absl::StatusOr<std::vector<LocalBuffer>> want = ExpectedBuffers(n.options);
    ASSERT_TRUE(want.ok()) << want.status();
    std::map<std::string, BufferRef> refs;
    for (const LocalBuffer& b : *want) {
      std::vector<char>& m = n.memory[b.name];
      m.assign(b.byte_size, static_cast<char>(0xEE));
      refs[b.name] = BufferRef{m.data(), b.byte_size};
    }
    absl::StatusOr<std::unique_ptr<Member>> m =
        Member::Join(n.options, std::move(refs), HybridDataPlane(&sources), deadline);
    ASSERT_TRUE(m.ok()) << m.status();
    n.member = std::move(*m);
  }
  std::vector<absl::Status> errors(nodes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      Member& m = *nodes[i].member;
      absl::Status s = m.Prepare(deadline);
      if (s.ok() && i < 2) s = testing::FillMemberPattern(m, 1);
      if (s.ok() && i == 0) s = m.StartRound(1, deadline);
      absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
      absl::StatusOr<RunStats> r = v.ok() ? m.RunRound(*v, deadline) : v.status();
      s = r.status();
      if (s.ok() && i >= 2) s = testing::CheckMemberPattern(m, 1);
      errors[i] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < nodes.size(); ++i) EXPECT_TRUE(errors[i].ok()) << i << ": " << errors[i];
  absl::StatusOr<v1::StatusResponse> st =
      nodes[0].member->client().GetStatus(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pull_pairs(), 2);
  EXPECT_EQ(st->network_pairs(), 2);
}

}  // namespace
}  // namespace refit
