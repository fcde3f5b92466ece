// Transport: how the executor moves one wave's messages between ranks.
//
// Ranks are global: trainer rank t is t, engine rank e is src_world + e
// (plan.h). A transport has num_lanes() independent lanes (each its own
// communicator / stream); on each lane at most one wave is in flight.
// StartWave posts all of a rank's sends and receives of one wave as one
// group; WaitWave waits for that group to complete, bounded by a deadline.
// The executor keeps up to num_lanes() waves in flight, one per lane.
//
// Pointers are of the transport's memory_kind(): host memory for the
// in-process and Gloo transports, device memory for NCCL. They must stay
// valid until WaitWave returns for that lane.
#ifndef REFIT_EXEC_TRANSPORT_TRANSPORT_H_
#define REFIT_EXEC_TRANSPORT_TRANSPORT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace refit {

enum class MemoryKind { kHost, kDevice };

struct SendOp {
  int32_t peer = 0;  // global rank
  const void* ptr = nullptr;
  int64_t bytes = 0;
};

struct RecvOp {
  int32_t peer = 0;  // global rank
  void* ptr = nullptr;
  int64_t bytes = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // This process's global rank and the number of global ranks.
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  virtual int32_t num_lanes() const = 0;
  virtual MemoryKind memory_kind() const = 0;

  // Posts one group of sends and receives on `lane`. Between two peers on
  // one lane, the i-th send of one matches the i-th receive of the other
  // (same byte count). Fails with FAILED_PRECONDITION if a wave is still
  // in flight on the lane, INVALID_ARGUMENT for a bad lane/peer, or the
  // error that broke the lane earlier (ABORTED/UNAVAILABLE). Posting never
  // blocks past `deadline`: a transport that may have to wait to enqueue
  // (NCCL's non-blocking communicators) fails with DEADLINE_EXCEEDED then.
  virtual absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                                  absl::Span<const RecvOp> recvs,
                                  absl::Time deadline) = 0;

  // Waits for the wave in flight on `lane` (OK at once if none). Fails
  // with DEADLINE_EXCEEDED naming the peers still pending when `deadline`
  // passes, ABORTED / UNAVAILABLE naming the peer when a peer died or the
  // connection broke. Never blocks past the deadline (plus a small margin
  // for tearing down). After a failure the lane is unusable.
  virtual absl::Status WaitWave(int32_t lane, absl::Time deadline) = 0;

  // Makes the wait in progress (from another thread) and every later
  // StartWave / WaitWave fail promptly with `reason`, e.g. when the
  // control plane aborted the round: a peer died before it connected, and
  // nothing on the wire would ever tell. Thread-safe; the transport is
  // unusable afterwards. A transport that cannot interrupt its waits
  // ignores it (they still end by their deadline); Gloo and NCCL do not.
  virtual void Cancel(const absl::Status& reason) { (void)reason; }

  // Waves that may be in flight on one lane at once (1 unless the
  // transport queues them, e.g. on a CUDA stream); WaitWave then waits for
  // the oldest.
  virtual int32_t max_waves_per_lane() const { return 1; }
};

// The one rule every transport checks its arguments by. CheckLane: OK when
// 0 <= lane < num_lanes, else INVALID_ARGUMENT naming `rank` and the lane.
absl::Status CheckLane(int32_t rank, int32_t lane, int32_t num_lanes);
// CheckWaveArguments: CheckLane, and every peer is another rank of
// [0, world_size): INVALID_ARGUMENT naming `rank` and the peer otherwise.
absl::Status CheckWaveArguments(int32_t rank, int32_t world_size, int32_t num_lanes,
                                 int32_t lane, absl::Span<const SendOp> sends,
                                 absl::Span<const RecvOp> recvs);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_TRANSPORT_H_
