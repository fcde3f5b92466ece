// RoundStreamReactor (see round_stream_reactor.h).
#include "server/round_stream_reactor.h"

#include "common/grpc_status.h"

namespace refit {

void RoundStreamReactor::Push(v1::RoundEvent event) {
  const v1::RoundEvent* start = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (finishing_) return;
    // A queued PLAN_CHANGED not yet being written is superseded by a newer
    // one: a slow reader gets the newest epoch, not a backlog.
    if (event.kind() == v1::RoundEvent::PLAN_CHANGED && queue_.size() >= 2 &&
        queue_.back().kind() == v1::RoundEvent::PLAN_CHANGED) {
      queue_.back() = std::move(event);
      return;
    }
    queue_.push_back(std::move(event));
    if (!writing_) {
      writing_ = true;
      start = &queue_.front();
    }
  }
  if (start != nullptr) StartWrite(start);
}

void RoundStreamReactor::End(absl::Status status) {
  bool finish_now = false;
  grpc::Status st = ToGrpcStatus(status);
  {
    absl::MutexLock l(&mu_);
    if (finishing_) return;
    finishing_ = true;
    end_status_ = st;
    finish_now = !writing_;
  }
  if (finish_now) Finish(st);
}

void RoundStreamReactor::OnWriteDone(bool ok) {
  const v1::RoundEvent* next = nullptr;
  bool finish = false;
  grpc::Status st;
  {
    absl::MutexLock l(&mu_);
    queue_.pop_front();
    if (!ok) {
      finishing_ = true;
      queue_.clear();
    }
    if (!queue_.empty()) {
      next = &queue_.front();
    } else {
      writing_ = false;
      if (finishing_) {
        finish = true;
        st = end_status_;
      }
    }
  }
  if (next != nullptr) {
    StartWrite(next);
  } else if (finish) {
    Finish(st);
  }
}

void RoundStreamReactor::OnCancel() {
  coordinator_->Unwatch(member_id_, this, "its stream dropped");
  End(absl::CancelledError(""));
}

void RoundStreamReactor::OnDone() {
  coordinator_->Unwatch(member_id_, this, "");
  delete this;
}

}  // namespace refit
