// HostPullRunner (see host_pull_runner.h).
#include "testing/host_pull_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exec/program/plan_side.h"
#include "exec/pull/pull_program.h"

namespace refit::testing {

absl::StatusOr<std::unique_ptr<HostPullRunner>> HostPullRunner::CreateReceiver(
    const Plan& slice, int32_t rank, const std::vector<char*>& buffers,
    const std::map<int32_t, HostPullSource>& sources,
    const std::function<bool(int32_t)>& pull_peer) {
  absl::StatusOr<PullProgram> p = BuildPullProgram(
      slice, rank, [&](int32_t t) { return pull_peer(GlobalRank(slice, Side::kTrainer, t)); });
  if (!p.ok()) return p.status();
  std::vector<char*> src(slice.src.buffers.size(), nullptr);
  for (const PullPeer& peer : p->peers) {
    auto it = sources.find(peer.src_rank);
    if (it == sources.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine rank ", rank, ": no source for trainer rank ", peer.src_rank));
    }
    const std::vector<int32_t> order = PairSourceBuffers(it->second.slice, peer.src_rank, rank);
    if (order.size() != peer.buffers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine rank ", rank, ": trainer rank ", peer.src_rank, " lists ", order.size(),
          " source buffers, the receiver ", peer.buffers.size()));
    }
    for (size_t k = 0; k < order.size(); ++k) {
      if (order[k] >= static_cast<int32_t>(it->second.buffers.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trainer rank ", peer.src_rank, ": buffer #", order[k], " is not given"));
      }
      src[peer.buffers[k]] = it->second.buffers[order[k]];
    }
  }
  absl::StatusOr<std::vector<ResolvedCopy>> rc =
      ResolveTasks(p->tasks, src, buffers, nullptr, nullptr);
  if (!rc.ok()) return rc.status();
  std::unique_ptr<HostPullRunner> r(new HostPullRunner());
  r->copies_ = std::move(*rc);
  r->bytes_ = p->bytes;
  return r;
}

absl::StatusOr<std::unique_ptr<HostPullRunner>> HostPullRunner::CreateSender(
    const Plan& slice, int32_t rank, const std::function<bool(int32_t)>& pull_peer) {
  std::unique_ptr<HostPullRunner> r(new HostPullRunner());
  r->sender_ = true;
  for (const Message& m : slice.messages) {
    if (m.src_rank == rank && pull_peer(GlobalRank(slice, Side::kEngine, m.dst_rank))) {
      r->bytes_ += m.bytes;
    }
  }
  return r;
}

absl::StatusOr<RunStats> HostPullRunner::Run(absl::Time deadline) {
  {
    absl::MutexLock l(&mu_);
    if (!cancelled_.ok()) return cancelled_;
  }
  if (absl::Now() > deadline) return absl::DeadlineExceededError("host pull round");
  const absl::Time start = absl::Now();
  RunStats s;
  if (sender_) {
    s.bytes_sent = bytes_;
  } else {
    RunCopiesHost(copies_);
    s.bytes_received = bytes_;
  }
  s.waves = 1;
  s.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return s;
}

void HostPullRunner::Cancel(const absl::Status& reason) {
  absl::MutexLock l(&mu_);
  cancelled_ = reason;
}

}  // namespace refit::testing
