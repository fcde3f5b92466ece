// RoundStreamReactor: one member's WatchRounds stream on gRPC's callback
// API. It is the coordinator's RoundStream for that member: events are
// queued and written one at a time; it detaches itself from the coordinator
// when the stream ends.
#ifndef REFIT_SERVER_ROUND_STREAM_REACTOR_H_
#define REFIT_SERVER_ROUND_STREAM_REACTOR_H_

#include <deque>
#include <string>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/refit_service.pb.h"
#include "server/coordinator.h"

namespace refit {

// Deletes itself when gRPC is done with the stream.
class RoundStreamReactor final : public grpc::ServerWriteReactor<v1::RoundEvent>,
                                 public RoundStream {
 public:
  // `coordinator` must outlive the stream.
  RoundStreamReactor(Coordinator* coordinator, std::string member_id)
      : coordinator_(coordinator), member_id_(std::move(member_id)) {}

  // Events a member may leave unread: past this its stream ends with
  // RESOURCE_EXHAUSTED (a member that does not read its stream cannot make
  // refitd hold an unbounded backlog).
  static constexpr size_t kMaxQueued = 256;

  // Queues `event`; a queued PLAN_CHANGED not yet being written is replaced
  // by a newer one; past kMaxQueued the stream ends. Non-blocking.
  void Push(SharedRoundEvent event) override;

  // Ends the stream with `status` after the queued events. Non-blocking.
  void End(absl::Status status) override;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  Coordinator* const coordinator_;
  const std::string member_id_;
  absl::Mutex mu_;
  std::deque<SharedRoundEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit

#endif  // REFIT_SERVER_ROUND_STREAM_REACTOR_H_
