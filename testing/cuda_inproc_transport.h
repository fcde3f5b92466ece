// CudaInProcTransport: a device transport for tests whose ranks are threads
// of one process, on one GPU (or several: each rank names its device). It
// is what NcclTransport is to the executor and the delta runner — a
// Transport of device memory and CudaLanes (one CUDA stream per lane) —
// without NCCL, which refuses two ranks on one GPU.
//
// Ranks share a CudaInProcFabric. A send and a receive match as in
// InProcFabric: same lane, same pair, i-th send with i-th receive in
// posting order; ops of 0 bytes are skipped (as NCCL skips them). The data
// moves on the device, ordered as an NCCL group on the lanes' streams:
//   * StartWave records a `ready` event on the poster's lane stream (after
//     the work enqueued there so far), then enqueues a gate: one GPU thread
//     that holds the stream until every op of the group has its flag (in
//     host-mapped memory) set. Posting never waits on a peer.
//   * The second of a matched pair to post enqueues the copy on its own
//     lane stream: wait the first poster's ready event, cudaMemcpyAsync,
//     then a host function that sets the first poster's flag. So the copy
//     reads the sender's buffer after the sender's earlier lane work,
//     writes the receiver's after the receiver's earlier lane work, and
//     later work on either lane stream runs after it (the sender may reuse
//     its buffer) — both streams meet there, as an NCCL group's kernels do.
//     No stream but the ranks' own: with up to 32 streams in the context
//     (two ranks of four lanes with their GPU wave ops), each has a
//     hardware queue of its own (CUDA_DEVICE_MAX_CONNECTIONS=32), so no
//     command queues behind another stream's held one.
//   * WaitWave polls an event recorded after the wave's gate: OK means the
//     wave's sends and receives are done on the device (the host may read
//     received bytes once copied off the device), like NcclTransport's.
//
// Failures never hang: a failed rank (WaitWave past its deadline, Cancel,
// a CUDA error, a byte-count mismatch, its transport destroyed, or
// CudaInProcFabric::Kill) withdraws its unmatched ops and opens their
// gates (the host sets their flags); every rank with an unmatched op
// waiting on it, or posting to it later, fails with ABORTED naming it (and
// so on, transitively). All lanes of a rank fail together, as
// NcclTransport aborts all of its lanes. Copies already matched run to
// completion.
//
// A gate spins on the GPU while its peer has not posted, as NCCL's kernels
// do. All ranks share the process's context, so anything that synchronizes
// the whole device (cudaFree, a kernel's first launch under CUDA's lazy
// loading) waits for every rank's gates: called by one rank while another
// rank's gate waits on that rank's next post, it would wait until that
// gate's deadline. A binary that links this transport therefore loads every
// kernel when the context is made (CUDA_MODULE_LOADING=EAGER) and sets
// CUDA_DEVICE_MAX_CONNECTIONS=32 (a hardware queue per stream: work of
// unrelated streams does not queue behind a held one), both before main;
// a check whose ranks allocate or free memory during rounds defers the
// frees and serves the allocations from pools (deferred_cuda_free.h). Test only: correctness over speed (a host
// function per copy, events per wave).
#ifndef REFIT_TESTING_CUDA_INPROC_TRANSPORT_H_
#define REFIT_TESTING_CUDA_INPROC_TRANSPORT_H_

#include <cuda_runtime_api.h>

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cancellation.h"
#include "exec/transport/cuda/cuda_lanes.h"
#include "exec/transport/transport.h"

namespace refit {
namespace testing {

class CudaInProcFabric {
 public:
  // Fails with INVALID_ARGUMENT unless world_size >= 1 and num_lanes >= 1.
  static absl::StatusOr<std::shared_ptr<CudaInProcFabric>> Create(int32_t world_size,
                                                                  int32_t num_lanes);

  // Fails `rank` (a crashed peer): its calls fail with ABORTED "rank R
  // killed", its peers' pending and later waves with it with ABORTED
  // naming it. No-op for a rank outside the fabric.
  void Kill(int32_t rank);

  int32_t world_size() const { return world_size_; }
  int32_t num_lanes() const { return num_lanes_; }

 private:
  friend class CudaInProcTransport;
  CudaInProcFabric(int32_t world_size, int32_t num_lanes)
      : world_size_(world_size), num_lanes_(num_lanes) {}

  // One posted, not yet matched send or receive.
  struct Op {
    int32_t owner = 0;
    int32_t lane = 0;
    int32_t peer = 0;
    void* ptr = nullptr;
    int64_t bytes = 0;
    std::shared_ptr<CUevent_st> ready;  // the owner's lane stream at the post
    cudaStream_t stream = nullptr;      // the owner's lane stream
    volatile int32_t* flag = nullptr;  // the op's gate flag (host address)
  };
  using Key = std::tuple<int32_t, int32_t, int32_t>;  // lane, sender, receiver

  // Posts a group (ops with bytes > 0 only). Fails with the rank's error,
  // or fails the rank (ABORTED naming a failed peer, INTERNAL for a byte
  // count mismatch, a CUDA error enqueueing a copy) and returns why.
  absl::Status Post(int32_t rank, std::vector<Op> sends, std::vector<Op> recvs);
  // OK, or why `rank` failed.
  absl::Status RankError(int32_t rank);
  // Fails `rank` with `why` (no-op if failed already), and transitively
  // every rank with an unmatched op waiting on a failed one.
  void Fail(int32_t rank, absl::Status why);
  void FailLocked(int32_t rank, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Enqueues on `stream` (the second poster's lane stream) the copy of a
  // matched pair after `first`'s ready event, then opens `first`'s gate.
  absl::Status CopyLocked(const Op& send, const Op& recv, const Op& first, cudaStream_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t world_size_;
  const int32_t num_lanes_;
  absl::Mutex mu_;
  std::vector<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  // Unmatched sends / receives per (lane, sender, receiver), oldest first.
  std::map<Key, std::deque<Op>> sends_ ABSL_GUARDED_BY(mu_);
  std::map<Key, std::deque<Op>> recvs_ ABSL_GUARDED_BY(mu_);
};

struct CudaInProcTransportOptions {
  int32_t device = 0;  // CUDA device of the rank's streams and buffers
};

class CudaInProcTransport : public Transport, public CudaLanes {
 public:
  // Creates the rank's lane streams on options.device. Fails with
  // INVALID_ARGUMENT for a rank outside the fabric, UNAVAILABLE naming the
  // rank when a stream cannot be created (no device).
  static absl::StatusOr<std::unique_ptr<CudaInProcTransport>> Create(
      std::shared_ptr<CudaInProcFabric> fabric, int32_t rank,
      CudaInProcTransportOptions options = {});
  // Fails the rank (peers still waiting on it get ABORTED), waits up to 10 s
  // for its lanes' streams to drain and frees what they no longer use.
  ~CudaInProcTransport() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return fabric_->world_size(); }
  int32_t num_lanes() const override { return fabric_->num_lanes(); }
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  // Never waits on a peer. Fails with INVALID_ARGUMENT for a bad lane or
  // peer, or the rank's error (see the file comment).
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs, absl::Time deadline) override;
  // Waits on the host for the oldest wave of `lane` to be done on the
  // device (OK at once if none). Fails with DEADLINE_EXCEEDED naming the
  // rank, lane and peers when `deadline` passes (the rank then fails), the
  // Cancel reason, or ABORTED naming the failed peer.
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override;
  // Thread-safe: fails the rank with `reason` at once (its waits see it
  // within microseconds; peers waiting on it get ABORTED naming it).
  void Cancel(const absl::Status& reason) override;
  // Waves queue on the lane's stream; WaitWave waits for the oldest.
  int32_t max_waves_per_lane() const override { return 1 << 20; }

  // OK, or the Cancel reason.
  absl::Status CheckCancelled() override;
  // The lane's cudaStream_t (as void*), or null for a bad lane.
  void* stream(int32_t lane) const override;
  int32_t device() const { return device_; }

 private:
  // Host-mapped gate flags of one wave.
  struct FlagBlock {
    int32_t* host = nullptr;
    int32_t* device = nullptr;
    int32_t capacity = 0;
  };
  struct Wave {
    std::shared_ptr<CUevent_st> ready;
    cudaEvent_t done = nullptr;
    FlagBlock flags;
    std::vector<int32_t> peers;
  };
  struct Lane {
    cudaStream_t stream = nullptr;
    std::deque<Wave> pending;  // oldest first
  };
  CudaInProcTransport(std::shared_ptr<CudaInProcFabric> f, int32_t rank,
                      CudaInProcTransportOptions o)
      : fabric_(std::move(f)), rank_(rank), device_(o.device) {}
  // Blocks made at Create, and the flags of each.
  static constexpr int32_t kPreparedBlocks = 32;
  static constexpr int32_t kFlagsPerBlock = 4096;
  // A new block of `n` flags (pinned, mapped).
  absl::StatusOr<FlagBlock> NewFlags(int32_t n);
  // A free block of at least `n` flags (a new one if none), zeroed.
  absl::StatusOr<FlagBlock> TakeFlags(int32_t n);
  // Fails the rank with `why` and returns it.
  absl::Status Fail(absl::Status why);

  std::shared_ptr<CudaInProcFabric> fabric_;
  const int32_t rank_;
  const int32_t device_;
  std::vector<Lane> lanes_;
  std::vector<FlagBlock> free_flags_;
  std::vector<FlagBlock> retired_flags_;  // of waves that failed to post (never freed)
  Cancellation cancel_{"transport cancelled"};
};

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_CUDA_INPROC_TRANSPORT_H_
