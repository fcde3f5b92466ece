// NcclTransport: device buffers over NCCL. One non-blocking communicator
// (ncclCommInitRankConfig, blocking = 0) and one CUDA stream per lane, the
// unique id of each lane exchanged through a KvStore. A wave is one
// ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd on the lane's stream.
// With options.inline_groups (the default) the waves go to a blocking
// communicator split from the lane's (ncclCommSplit, polled against the
// connect deadline): NCCL starts a thread for every group of a non-blocking
// communicator (about 130 us a group on an H200 host, against 25 us
// inline), and a delta round posts one group per batch on each side. A
// blocking group only waits on a peer while it connects to it, so the first
// group that sends to or receives from a peer on a lane runs on a helper
// thread and is awaited against the deadline; once connected, groups are
// launched inline (kernels enqueued, nothing awaited). A first group that
// misses its deadline leaves that lane's communicator to its helper (not
// aborted under it) and fails as any wave does.
// WaitWave polls the wave's event and ncclCommGetAsyncError against the
// deadline and, on timeout or error, aborts the communicators of EVERY lane
// (ncclCommAbort) and returns a status naming the peers and
// ncclGetLastError. All lanes go down together: a dead peer leaves the other
// lanes' kernels spinning on receives that never arrive, and a spinning
// kernel would block any later cudaFree or device synchronization (the
// executor's teardown) forever. Afterwards every call fails with the first
// error; build a new transport to go on.
//
// Its lanes are CudaLanes: MakeCudaCopier (cuda_copier.h) gives the
// executor device staging and the pack/unpack kernels on the same lane
// streams (so packing is stream-ordered before the wave's sends).
#ifndef REFIT_EXEC_TRANSPORT_CUDA_NCCL_TRANSPORT_H_
#define REFIT_EXEC_TRANSPORT_CUDA_NCCL_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "exec/transport/cuda/cuda_lanes.h"
#include "exec/transport/kv_store.h"
#include "exec/transport/transport.h"

namespace refit {

struct NcclTransportOptions {
  int32_t num_lanes = 2;
  int32_t device = 0;  // CUDA device of this rank
  std::string key_prefix = "refit/nccl";
  absl::Duration connect_timeout = absl::Seconds(60);
  // Waves on a blocking communicator split from the lane's, launched inline
  // once connected to their peers (see above); false: on the non-blocking
  // communicator, every group awaited through ncclCommGetAsyncError.
  bool inline_groups = true;
};

class NcclTransport : public Transport, public CudaLanes {
 public:
  // Creates the lanes' communicators. Fails with UNAVAILABLE (no device,
  // NCCL error with its last-error text), DEADLINE_EXCEEDED if the unique
  // id or the communicator setup does not arrive within connect_timeout.
  static absl::StatusOr<std::unique_ptr<NcclTransport>> Create(
      KvStore* store, int32_t rank, int32_t world_size,
      NcclTransportOptions options = {});
  ~NcclTransport() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  int32_t num_lanes() const override;
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs,
                          absl::Time deadline) override;
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override;
  // The polling waits see it within microseconds and take every lane down
  // (revoke + abort), as for a failed wave.
  void Cancel(const absl::Status& reason) override;
  // Waves queue on the lane's stream; WaitWave waits for the oldest.
  int32_t max_waves_per_lane() const override { return 1 << 20; }

  // OK, or — after Cancel — takes every lane down (once) and returns the
  // reason. For waits outside the transport on its lanes' streams (the copy
  // engine's Sync), which a spinning NCCL kernel would otherwise hold until
  // their deadline.
  absl::Status CheckCancelled() override;

  // The lane's cudaStream_t (as void*), or null for a bad lane.
  void* stream(int32_t lane) const override;
  int32_t device() const { return device_; }

 private:
  struct Lane;
  NcclTransport() = default;
  absl::Status Abort(Lane& lane, absl::Status why);
  // inline_groups: whether `lane` has connected to every peer of the group.
  static bool Connected(const Lane& lane, absl::Span<const SendOp> sends,
                        absl::Span<const RecvOp> recvs);
  // inline_groups: posts a group with a peer not yet connected on a helper
  // thread (connecting waits on the peer) and awaits it against `deadline`
  // and Cancel; marks its peers connected. On timeout or cancel the lane's
  // communicator is left to the helper.
  absl::Status FirstGroup(Lane& lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs, absl::Time deadline,
                          const std::string& what);
  int32_t rank_ = 0;
  int32_t world_size_ = 0;
  int32_t device_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Set by Cancel; polled by the owner thread's waits.
  Cancellation cancel_{"transport cancelled"};
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_CUDA_NCCL_TRANSPORT_H_
