// Waits (see waits.h).
#include "server/waits.h"

#include "absl/strings/str_cat.h"

namespace refit {

Waits::Id Waits::Add(Waiter w) {
  const Id id = next_++;
  w.id = id;
  waiters_.emplace(id, std::move(w));
  return id;
}

void Waits::Cancel(Id id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  w.Fail(absl::CancelledError(""));
}

void Waits::Expire(absl::Time now, const std::string& plan_why) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (now >= it->second.deadline) {
      const Waiter& w = it->second;
      w.Fail(absl::DeadlineExceededError(
          w.kv_done ? absl::StrCat("key ", w.key, " not set before the deadline")
                    : plan_why.empty()
                          ? std::string("no plan before the deadline")
                          : absl::StrCat("no plan before the deadline: ", plan_why)));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Waits::Wake(const std::function<bool(Waiter&)>& answer) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (answer(it->second)) {
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Waits::EndAll(const absl::Status& status) {
  for (auto& [id, w] : waiters_) w.Fail(status);
  waiters_.clear();
}

}  // namespace refit
