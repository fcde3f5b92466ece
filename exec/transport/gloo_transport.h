// GlooTransport: host buffers over TCP with Gloo (one gloo context per
// lane, bootstrapped through a refit::KvStore). Each message is one Gloo
// unbound-buffer send/recv; the slot is the per-pair sequence number, so the
// i-th send from a to b on a lane matches b's i-th receive from a. Every
// wait is bounded by the caller's deadline; a dead peer surfaces as
// UNAVAILABLE naming it (closed connection) or DEADLINE_EXCEEDED.
// Once a wave failed or the transport was cancelled, every connection is
// closed: a send or receive still posted never touches the caller's memory
// again (the caller may free it), and the peers' waits on this rank fail.
#ifndef REFIT_EXEC_TRANSPORT_GLOO_TRANSPORT_H_
#define REFIT_EXEC_TRANSPORT_GLOO_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "exec/transport/kv_store.h"
#include "exec/transport/transport.h"

namespace refit {

struct GlooTransportOptions {
  int32_t num_lanes = 2;
  std::string hostname = "127.0.0.1";  // address this rank listens on
  std::string key_prefix = "refit/gloo";  // KvStore namespace (per plan)
  absl::Duration connect_timeout = absl::Seconds(30);
};

class GlooTransport : public Transport {
 public:
  // Connects `world_size` ranks (full mesh per lane) through `store`.
  // Fails with DEADLINE_EXCEEDED / UNAVAILABLE naming the lane when the
  // rendezvous does not complete within connect_timeout, INVALID_ARGUMENT
  // for bad ranks or lanes. `store` must outlive the call only.
  static absl::StatusOr<std::unique_ptr<GlooTransport>> Create(
      KvStore* store, int32_t rank, int32_t world_size,
      GlooTransportOptions options = {});
  ~GlooTransport() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  int32_t num_lanes() const override;
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs,
                          absl::Time deadline) override;
  // Fails with the wave's error (DEADLINE_EXCEEDED, UNAVAILABLE naming the
  // peer, or the cancel reason) and then closes every connection.
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override;
  // Aborts the waits of every posted buffer (gloo's abortWaitSend/Recv) and
  // closes every connection. Safe from any thread.
  void Cancel(const absl::Status& reason) override;

 private:
  struct Lane;
  GlooTransport() = default;
  // Closes every lane's connections (idempotent, safe from any thread):
  // gloo reads and writes nothing more through them.
  void CloseConnections();
  int32_t rank_ = 0;
  int32_t world_size_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Guards the lanes' in_flight lists against Cancel from another thread
  // (the owner thread reads them unlocked: it is their only writer); Cancel
  // cancels cancel_ under it, so a buffer posted after Cancel sees it.
  absl::Mutex cancel_mu_;
  Cancellation cancel_{"transport cancelled"};
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_GLOO_TRANSPORT_H_
