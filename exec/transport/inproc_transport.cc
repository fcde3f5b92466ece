// InProcTransport: threads of one process, matched by memcpy.
#include "exec/transport/inproc_transport.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "absl/strings/str_join.h"

namespace refit {

absl::StatusOr<std::shared_ptr<InProcFabric>> InProcFabric::Create(
    int32_t world_size, int32_t num_lanes) {
  if (world_size < 1 || num_lanes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-process fabric needs world_size >= 1 and lanes >= 1, "
                     "got ",
                     world_size, " and ", num_lanes));
  }
  std::shared_ptr<InProcFabric> f(new InProcFabric(world_size, num_lanes));
  absl::MutexLock l(&f->mu_);
  f->dead_.assign(world_size, false);
  f->lanes_.resize(static_cast<size_t>(world_size) * num_lanes);
  return f;
}

void InProcFabric::Kill(int32_t rank) {
  absl::MutexLock l(&mu_);
  if (rank < 0 || rank >= world_size_) return;
  dead_[rank] = true;
  for (int32_t r = 0; r < world_size_; ++r) {
    for (int32_t lane = 0; lane < num_lanes_; ++lane) {
      LaneState& st = lanes_[r * num_lanes_ + lane];
      if (st.pending_peers.count(rank) && st.error.ok()) {
        st.error = absl::AbortedError(
            absl::StrCat("rank ", r, " lane ", lane, ": peer rank ", rank,
                         " died"));
      }
    }
  }
}

void InProcFabric::Complete(int32_t rank, int32_t lane, int32_t peer,
                            absl::Status s) {
  LaneState& st = lanes_[rank * num_lanes_ + lane];
  auto it = st.pending_peers.find(peer);
  if (it != st.pending_peers.end()) st.pending_peers.erase(it);
  --st.outstanding;
  if (!s.ok() && st.error.ok()) st.error = s;
}

absl::Status InProcFabric::Start(int32_t rank, int32_t lane,
                                 absl::Span<const SendOp> sends,
                                 absl::Span<const RecvOp> recvs) {
  REFIT_RETURN_IF_ERROR(CheckWaveArguments(rank, world_size_, num_lanes_, lane, sends, recvs));
  absl::MutexLock l(&mu_);
  LaneState& me = lanes_[rank * num_lanes_ + lane];
  if (!me.error.ok()) return me.error;
  if (me.in_flight) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, ": a wave is still in flight on lane ", lane));
  }
  me.in_flight = true;
  me.outstanding = static_cast<int64_t>(sends.size() + recvs.size());
  for (const SendOp& s : sends) me.pending_peers.insert(s.peer);
  for (const RecvOp& r : recvs) me.pending_peers.insert(r.peer);
  for (const SendOp& s : sends) {
    if (dead_[s.peer]) {
      Complete(rank, lane, s.peer,
               absl::AbortedError(absl::StrCat("rank ", rank, " lane ", lane,
                                               ": peer rank ", s.peer,
                                               " died")));
      continue;
    }
    auto& q = recvs_[Key(lane, rank, s.peer)];
    if (q.empty()) {
      sends_[Key(lane, rank, s.peer)].push_back(
          Pending{const_cast<void*>(s.ptr), s.bytes});
      continue;
    }
    Pending r = q.front();
    q.pop_front();
    absl::Status st;
    if (r.bytes != s.bytes) {
      st = absl::InternalError(absl::StrCat(
          "lane ", lane, ": rank ", rank, " sends ", s.bytes, " bytes but rank ",
          s.peer, " expects ", r.bytes));
    } else if (s.bytes > 0) {
      std::memcpy(r.ptr, s.ptr, s.bytes);
    }
    Complete(rank, lane, s.peer, st);
    Complete(s.peer, lane, rank, st);
  }
  for (const RecvOp& r : recvs) {
    if (dead_[r.peer]) {
      Complete(rank, lane, r.peer,
               absl::AbortedError(absl::StrCat("rank ", rank, " lane ", lane,
                                               ": peer rank ", r.peer,
                                               " died")));
      continue;
    }
    auto& q = sends_[Key(lane, r.peer, rank)];
    if (q.empty()) {
      recvs_[Key(lane, r.peer, rank)].push_back(Pending{r.ptr, r.bytes});
      continue;
    }
    Pending s = q.front();
    q.pop_front();
    absl::Status st;
    if (r.bytes != s.bytes) {
      st = absl::InternalError(absl::StrCat(
          "lane ", lane, ": rank ", r.peer, " sends ", s.bytes,
          " bytes but rank ", rank, " expects ", r.bytes));
    } else if (s.bytes > 0) {
      std::memcpy(r.ptr, s.ptr, s.bytes);
    }
    Complete(rank, lane, r.peer, st);
    Complete(r.peer, lane, rank, st);
  }
  return absl::OkStatus();
}

absl::Status InProcFabric::Wait(int32_t rank, int32_t lane,
                                absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckLane(rank, lane, num_lanes_));
  absl::MutexLock l(&mu_);
  LaneState& me = lanes_[rank * num_lanes_ + lane];
  if (!me.in_flight) return me.error;
  auto done = [&me]() { return me.outstanding == 0 || !me.error.ok(); };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (!me.error.ok()) {
    Withdraw(rank, lane);
    return me.error;
  }
  if (me.outstanding > 0) {
    std::set<int32_t> peers(me.pending_peers.begin(), me.pending_peers.end());
    me.error = absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank, " lane ", lane, ": wave not complete by the deadline, "
        "still waiting for peer rank(s) ",
        absl::StrJoin(peers, ", ")));
    Withdraw(rank, lane);
    return me.error;
  }
  me.in_flight = false;
  return absl::OkStatus();
}

void InProcFabric::Withdraw(int32_t rank, int32_t lane) {
  for (int32_t peer = 0; peer < world_size_; ++peer) {
    sends_.erase(Key(lane, rank, peer));
    recvs_.erase(Key(lane, peer, rank));
  }
}

void InProcFabric::WithdrawAll(int32_t rank) {
  absl::MutexLock l(&mu_);
  for (int32_t lane = 0; lane < num_lanes_; ++lane) Withdraw(rank, lane);
}

absl::StatusOr<std::unique_ptr<InProcTransport>> InProcTransport::Create(
    std::shared_ptr<InProcFabric> fabric, int32_t rank) {
  if (fabric == nullptr || rank < 0 || rank >= fabric->world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-process transport: rank ", rank, " out of range"));
  }
  return std::unique_ptr<InProcTransport>(
      new InProcTransport(std::move(fabric), rank));
}

absl::Status InProcTransport::StartWave(int32_t lane,
                                         absl::Span<const SendOp> sends,
                                         absl::Span<const RecvOp> recvs,
                                         absl::Time /*deadline: posting never blocks*/) {
  return fabric_->Start(rank_, lane, sends, recvs);
}

absl::Status InProcTransport::WaitWave(int32_t lane, absl::Time deadline) {
  return fabric_->Wait(rank_, lane, deadline);
}

InProcTransport::~InProcTransport() { fabric_->WithdrawAll(rank_); }

}  // namespace refit
