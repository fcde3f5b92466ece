// Waits (see waits.h).
#include "server/waits.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace refit {

Waits::Id Waits::Add(Waiter w) {
  const Id id = next_++;
  w.id = id;
  Entry e;
  e.by_deadline = by_deadline_.emplace(w.deadline, id);
  if (w.kv_done) {
    e.by_key = by_key_.emplace(w.key, id);
    ++kv_waits_;
    ++kv_waits_by_caller_[w.caller];
  }
  e.w = std::move(w);
  waiters_.emplace(id, std::move(e));
  return id;
}

Waiter Waits::Remove(std::map<Id, Entry>::iterator it) {
  Entry& e = it->second;
  by_deadline_.erase(e.by_deadline);
  if (e.w.kv_done) {
    by_key_.erase(e.by_key);
    --kv_waits_;
    auto c = kv_waits_by_caller_.find(e.w.caller);
    if (c != kv_waits_by_caller_.end() && --c->second <= 0) kv_waits_by_caller_.erase(c);
  }
  Waiter w = std::move(e.w);
  waiters_.erase(it);
  return w;
}

int64_t Waits::kv_waits_of(const std::string& caller) const {
  auto it = kv_waits_by_caller_.find(caller);
  return it == kv_waits_by_caller_.end() ? 0 : it->second;
}

absl::Status Waits::KvRoom(const Waiter& w, int64_t max_total, int64_t max_per_caller) const {
  const bool all = kv_waits_ >= max_total;
  const int64_t of_caller = kv_waits_of(w.caller);
  if (!all && of_caller < max_per_caller) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "key ", w.key, ": ", all ? kv_waits_ : of_caller, " KvGet waits are parked",
      all ? "" : absl::StrCat(" from ", w.caller), ", the limit (",
      all ? "--max_kv_waits" : "--max_kv_waits_per_caller", "); retry later"));
}

void Waits::Cancel(Id id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  Remove(it).Fail(absl::CancelledError(""));
}

void Waits::Expire(absl::Time now, const std::string& plan_why) {
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const Waiter w = Remove(waiters_.find(by_deadline_.begin()->second));
    w.Fail(absl::DeadlineExceededError(
        w.kv_done ? absl::StrCat("key ", w.key, " not set before the deadline")
                  : plan_why.empty()
                        ? std::string("no plan before the deadline")
                        : absl::StrCat("no plan before the deadline: ", plan_why)));
  }
}

void Waits::Wake(const std::function<bool(Waiter&)>& answer) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (answer(it->second.w)) {
      auto next = std::next(it);
      Remove(it);
      it = next;
    } else {
      ++it;
    }
  }
}

void Waits::WakeKey(const std::string& key, const std::function<bool(Waiter&)>& answer) {
  std::vector<Id> ids;
  for (auto [it, end] = by_key_.equal_range(key); it != end; ++it) ids.push_back(it->second);
  for (Id id : ids) {
    auto it = waiters_.find(id);
    if (it != waiters_.end() && answer(it->second.w)) Remove(it);
  }
}

void Waits::EndAll(const absl::Status& status) {
  while (!waiters_.empty()) Remove(waiters_.begin()).Fail(status);
}

}  // namespace refit
