// RoundStreamReactor (see round_stream_reactor.h).
#include "server/round_stream_reactor.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace refit {

void RoundStreamReactor::Push(SharedRoundEvent event) {
  const v1::RoundEvent* start = nullptr;
  bool finish_now = false;
  grpc::Status st;
  {
    absl::MutexLock l(&mu_);
    if (finishing_) return;
    // A queued PLAN_CHANGED not yet being written is superseded by a newer
    // one: a slow reader gets the newest epoch, not a backlog.
    if (event->kind() == v1::RoundEvent::PLAN_CHANGED && queue_.size() >= 2 &&
        queue_.back()->kind() == v1::RoundEvent::PLAN_CHANGED) {
      queue_.back() = std::move(event);
      return;
    }
    if (queue_.size() >= kMaxQueued) {
      // Drop the backlog but the event being written; end after it.
      queue_.resize(writing_ ? 1 : 0);
      finishing_ = true;
      end_status_ = grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("member ", member_id_, " left ", kMaxQueued,
                       " round events unread; its round stream is closed"));
      finish_now = !writing_;
      st = end_status_;
    } else {
      queue_.push_back(std::move(event));
      if (!writing_) {
        writing_ = true;
        start = queue_.front().get();
      }
    }
  }
  if (start != nullptr) {
    StartWrite(start);
  } else if (finish_now) {
    Finish(st);
  }
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
      next = queue_.front().get();
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
