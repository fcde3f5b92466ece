// InProcTransport: every rank is a thread of one process (unit tests and
// `refit simulate`). Ranks share an InProcFabric; a send and the matching
// receive (same lane, same pair, in posting order) are copied with memcpy
// by whichever of the two posts second. Host memory only.
#ifndef REFIT_EXEC_TRANSPORT_INPROC_TRANSPORT_H_
#define REFIT_EXEC_TRANSPORT_INPROC_TRANSPORT_H_

#include <deque>
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "exec/transport/transport.h"

namespace refit {

class InProcFabric {
 public:
  // Fails with INVALID_ARGUMENT unless world_size >= 1 and num_lanes >= 1.
  static absl::StatusOr<std::shared_ptr<InProcFabric>> Create(
      int32_t world_size, int32_t num_lanes);

  // Marks `rank` dead (simulates a crashed peer): its peers' pending and
  // later waves with it fail with ABORTED naming it.
  void Kill(int32_t rank);

  int32_t world_size() const { return world_size_; }
  int32_t num_lanes() const { return num_lanes_; }

 private:
  friend class InProcTransport;
  InProcFabric(int32_t world_size, int32_t num_lanes)
      : world_size_(world_size), num_lanes_(num_lanes) {}

  struct Pending {
    void* ptr;  // send: source; recv: destination
    int64_t bytes;
  };
  struct LaneState {
    int64_t outstanding = 0;
    bool in_flight = false;
    absl::Status error;
    std::multiset<int32_t> pending_peers;
  };
  // Index of (lane, from, to).
  size_t Key(int32_t lane, int32_t from, int32_t to) const {
    return (static_cast<size_t>(lane) * world_size_ + from) * world_size_ + to;
  }
  absl::Status Start(int32_t rank, int32_t lane, absl::Span<const SendOp> s,
                     absl::Span<const RecvOp> r);
  absl::Status Wait(int32_t rank, int32_t lane, absl::Time deadline);
  // Drops `rank`'s unmatched sends and receives on `lane`: no peer copies
  // into or out of that memory any more (its owner may free it).
  void Withdraw(int32_t rank, int32_t lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WithdrawAll(int32_t rank);
  void Complete(int32_t rank, int32_t lane, int32_t peer, absl::Status s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t world_size_;
  const int32_t num_lanes_;
  absl::Mutex mu_;
  std::vector<bool> dead_ ABSL_GUARDED_BY(mu_);
  // Unmatched sends / receives per (lane, from, to).
  std::map<size_t, std::deque<Pending>> sends_ ABSL_GUARDED_BY(mu_);
  std::map<size_t, std::deque<Pending>> recvs_ ABSL_GUARDED_BY(mu_);
  std::vector<LaneState> lanes_ ABSL_GUARDED_BY(mu_);  // rank * lanes + lane
};

class InProcTransport : public Transport {
 public:
  // Fails with INVALID_ARGUMENT if rank is outside the fabric.
  static absl::StatusOr<std::unique_ptr<InProcTransport>> Create(
      std::shared_ptr<InProcFabric> fabric, int32_t rank);

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return fabric_->world_size(); }
  int32_t num_lanes() const override { return fabric_->num_lanes(); }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs,
                          absl::Time deadline) override;
  // A failed wait leaves nothing posted: a peer's later send or receive
  // never touches this rank's memory.
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override;
  // Withdraws what is still posted, as a failed wait does.
  ~InProcTransport() override;

 private:
  InProcTransport(std::shared_ptr<InProcFabric> f, int32_t rank)
      : fabric_(std::move(f)), rank_(rank) {}
  std::shared_ptr<InProcFabric> fabric_;
  int32_t rank_;
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_INPROC_TRANSPORT_H_
