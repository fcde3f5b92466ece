// Waits (see waits.h).
#include "server/waits.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

int64_t CountOf(const std::string& k, const std::map<std::string, int64_t>& counts) {
  auto it = counts.find(k);
  return it == counts.end() ? 0 : it->second;
}

void Decrement(const std::string& k, std::map<std::string, int64_t>* counts) {
  auto it = counts->find(k);
  if (it != counts->end() && --it->second <= 0) counts->erase(it);
}

}  // namespace

Waits::Id Waits::Add(Waiter w) {
  const Id id = next_++;
  w.id = id;
  Entry e;
  e.by_deadline = by_deadline_.emplace(w.deadline, id);
  if (w.kv_done) {
    e.by_key = by_key_.emplace(w.key, id);
    ++kv_waits_;
    ++kv_waits_by_member_[w.member_id];
    if (!w.planned) {
      ++unplanned_kv_waits_;
      ++kv_waits_by_caller_[w.caller];
    }
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
    Decrement(e.w.member_id, &kv_waits_by_member_);
    if (!e.w.planned) {
      --unplanned_kv_waits_;
      Decrement(e.w.caller, &kv_waits_by_caller_);
    }
  }
  Waiter w = std::move(e.w);
  waiters_.erase(it);
  return w;
}

int64_t Waits::kv_waits_of(const std::string& caller) const {
  return CountOf(caller, kv_waits_by_caller_);
}

int64_t Waits::kv_waits_of_member(const std::string& member) const {
  return CountOf(member, kv_waits_by_member_);
}

absl::Status Waits::KvRoom(const Waiter& w, const KvLimits& limits) const {
  const int64_t of_member = kv_waits_of_member(w.member_id);
  if (of_member >= limits.max_per_member) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key ", w.key, ": ", of_member, " KvGet waits of member ", w.member_id,
        " are parked, the limit (--max_kv_waits_per_member); retry later"));
  }
  if (w.planned) return absl::OkStatus();
  const bool all = unplanned_kv_waits_ >= limits.max_total;
  const int64_t of_caller = kv_waits_of(w.caller);
  if (!all && of_caller < limits.max_per_caller) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "key ", w.key, ": ", all ? unplanned_kv_waits_ : of_caller,
      " KvGet waits of members outside the plan are parked",
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
