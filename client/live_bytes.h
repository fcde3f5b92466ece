// LiveBytes: the bytes a member's data plane moved of the round in flight,
// counted as its transport's waves complete, for the figure each heartbeat
// sends refitd (HeartbeatRequest.round_bytes) while the round runs.
// CountingTransports wraps the member's transport factory so that every
// transport it makes counts into one LiveBytes. The colocated pull path
// moves no bytes through a transport: its members count none.
#ifndef REFIT_CLIENT_LIVE_BYTES_H_
#define REFIT_CLIENT_LIVE_BYTES_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "exec/member_runner.h"

namespace refit {

// Thread-safe counters of one member's sent and received bytes.
class LiveBytes {
 public:
  // Adds one completed wave's bytes.
  void Add(int64_t sent, int64_t received) {
    sent_.fetch_add(sent, std::memory_order_relaxed);
    received_.fetch_add(received, std::memory_order_relaxed);
  }
  // Starts a round: both counters 0.
  void Reset() {
    sent_.store(0, std::memory_order_relaxed);
    received_.store(0, std::memory_order_relaxed);
  }
  // Returns the bytes moved so far as the member's report counts them: the
  // larger of those sent and those received.
  int64_t moved() const {
    const int64_t s = sent_.load(std::memory_order_relaxed);
    const int64_t r = received_.load(std::memory_order_relaxed);
    return s > r ? s : r;
  }

 private:
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> received_{0};
};

// Returns a factory that makes `factory`'s transports, each wrapped to add
// the bytes of every wave that completes (WaitWave OK) to `*live`; the
// wrapped transport otherwise behaves as the inner one (same errors).
TransportFactory CountingTransports(TransportFactory factory, std::shared_ptr<LiveBytes> live);

}  // namespace refit

#endif  // REFIT_CLIENT_LIVE_BYTES_H_
