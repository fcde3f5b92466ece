#include "client/live_bytes.h"

#include <deque>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace refit {
namespace {

// A transport that forwards every call to `inner` and counts the bytes of
// the waves it completes.
class CountingTransport : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, std::shared_ptr<LiveBytes> live)
      : inner_(std::move(inner)), live_(std::move(live)) {
    pending_.resize(inner_->num_lanes() > 0 ? inner_->num_lanes() : 0);
  }

  int32_t rank() const override { return inner_->rank(); }
  int32_t world_size() const override { return inner_->world_size(); }
  int32_t num_lanes() const override { return inner_->num_lanes(); }
  MemoryKind memory_kind() const override { return inner_->memory_kind(); }
  int32_t max_waves_per_lane() const override { return inner_->max_waves_per_lane(); }
  void Cancel(const absl::Status& reason) override { inner_->Cancel(reason); }

  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                         absl::Span<const RecvOp> recvs, absl::Time deadline) override {
    absl::Status s = inner_->StartWave(lane, sends, recvs, deadline);
    if (!s.ok()) return s;
    int64_t sent = 0, received = 0;
    for (const SendOp& op : sends) sent += op.bytes;
    for (const RecvOp& op : recvs) received += op.bytes;
    absl::MutexLock l(&mu_);
    if (lane >= 0 && lane < static_cast<int32_t>(pending_.size())) {
      pending_[lane].emplace_back(sent, received);
    }
    return s;
  }

  absl::Status WaitWave(int32_t lane, absl::Time deadline) override {
    absl::Status s = inner_->WaitWave(lane, deadline);
    absl::MutexLock l(&mu_);
    if (lane < 0 || lane >= static_cast<int32_t>(pending_.size())) return s;
    std::deque<std::pair<int64_t, int64_t>>& q = pending_[lane];
    if (!s.ok()) {
      q.clear();  // the lane is unusable now
      return s;
    }
    if (!q.empty()) {  // the oldest wave of the lane completed
      live_->Add(q.front().first, q.front().second);
      q.pop_front();
    }
    return s;
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<LiveBytes> live_;
  absl::Mutex mu_;
  // Per lane, the (sent, received) bytes of its waves in flight, oldest first.
  std::vector<std::deque<std::pair<int64_t, int64_t>>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

TransportFactory CountingTransports(TransportFactory factory, std::shared_ptr<LiveBytes> live) {
  return [factory = std::move(factory), live = std::move(live)](
             KvStore* store, int32_t rank, int32_t world,
             int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    absl::StatusOr<std::unique_ptr<Transport>> t = factory(store, rank, world, lanes);
    if (!t.ok()) return t;
    return std::unique_ptr<Transport>(std::make_unique<CountingTransport>(std::move(*t), live));
  };
}

}  // namespace refit
