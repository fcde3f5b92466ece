// IpcTransport: device buffers between processes of ONE host through CUDA
// IPC, for a trainer and an engine that share GPUs (colocated), which NCCL
// refuses ("Duplicate GPU detected"); it works between different GPUs of
// the host too (peer access over NVLink / PCIe).
//
// The receiver pulls. A round on a lane:
//   1. every rank waits for its lane's stream (the sender's packs are done);
//   2. each sender tells each receiver, over a Gloo (TCP) control channel,
//      where every message lies: the CUDA IPC handle of the allocation that
//      holds it and the offset in it (a handle is exported once per
//      allocation; staging and registered buffers never move);
//   3. the receiver opens the handle (once), and copies the bytes into its
//      own buffer on the lane's stream (cudaMemcpyAsync; the executor's
//      unpack follows on the same stream); a receiver in the sender's own
//      process (both members in one process) copies from the address;
//   4. WaitRound: the receiver waits for its stream, then acknowledges each
//      message; the sender waits for the acknowledgements before its
//      staging may be reused.
// MakeCudaCopyEngine (cuda_copy_engine.h) gives the executor its staging and
// pack/unpack kernels on the same lane streams.
// Memory must come from cudaMalloc (PyTorch's caching allocator by
// default): memory that cannot be exported (e.g. PyTorch's
// expandable_segments, cudaMallocAsync pools) fails the round with
// FAILED_PRECONDITION naming the address. Every wait polls the deadline and
// Cancel; a dead peer surfaces through the control channel (UNAVAILABLE /
// DEADLINE_EXCEEDED naming it). Verify mode is not supported (device lanes).
#ifndef REFIT_EXEC_CUDA_IPC_TRANSPORT_H_
#define REFIT_EXEC_CUDA_IPC_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "exec/cuda/cuda_lanes.h"
#include "exec/gloo_transport.h"
#include "exec/kv_store.h"
#include "exec/transport.h"

namespace refit {

struct IpcTransportOptions {
  int32_t num_lanes = 2;
  int32_t device = 0;  // CUDA device of this rank
  std::string key_prefix = "refit/ipc";
  absl::Duration connect_timeout = absl::Seconds(60);
};

class IpcTransport : public Transport, public CudaLanes {
 public:
  // Creates the lane streams and connects the control channel (Gloo on
  // 127.0.0.1: every rank must be on this host). UNAVAILABLE for a device
  // error, the control channel's error otherwise.
  static absl::StatusOr<std::unique_ptr<IpcTransport>> Create(
      KvStore* store, int32_t rank, int32_t world_size,
      IpcTransportOptions options = {});
  ~IpcTransport() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  int32_t num_lanes() const override;
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  absl::Status StartRound(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs,
                          absl::Time deadline) override;
  absl::Status WaitRound(int32_t lane, absl::Time deadline) override;
  void Cancel(const absl::Status& reason) override;

  void* stream(int32_t lane) const override;
  absl::Status CheckCancelled() override;

 private:
  struct Lane;
  IpcTransport() = default;
  // Waits for the lane's stream, polling `deadline` and Cancel.
  absl::Status SyncStream(int32_t lane, absl::Time deadline, const char* what);
  // The exportable allocation holding `p`: its IPC handle and p's offset.
  absl::Status Export(const void* p, int64_t bytes, std::string* handle,
                      int64_t* offset);
  // `handle` opened in this process (cached).
  absl::StatusOr<char*> Open(int32_t peer, const std::string& handle);

  int32_t rank_ = 0;
  int32_t world_size_ = 0;
  int32_t device_ = 0;
  std::unique_ptr<GlooTransport> control_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::map<uintptr_t, std::pair<uintptr_t, std::string>> exported_;  // base -> (end, handle)
  std::map<std::string, char*> opened_;
  Cancellation cancel_;  // set by Cancel; polled by the waits
};

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_IPC_TRANSPORT_H_
