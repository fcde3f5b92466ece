// Cancellation (see cancellation.h).
#include "common/cancellation.h"

namespace refit {

bool Cancellation::Cancel(const absl::Status& reason) {
  absl::MutexLock l(&mu_);
  if (!reason_.ok()) return false;
  reason_ = reason.ok() ? absl::CancelledError(default_message_) : reason;
  cancelled_.store(true, std::memory_order_release);
  return true;
}

absl::Status Cancellation::status() const {
  if (!cancelled()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  return reason_;
}

}  // namespace refit
