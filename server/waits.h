// Waits: the parked AwaitPlan and KvGet calls, each answered exactly once —
// when its condition holds, at its deadline, on cancel, or at shutdown. Not
// thread-safe: its owner holds the lock. Waits are indexed by deadline (a
// tick expires only those due) and KV waits by key (a KvSet wakes only the
// waits for its key), and KV waits are counted per caller, so that their
// owner can bound them (Coordinator: --max_kv_waits).
#ifndef REFIT_SERVER_WAITS_H_
#define REFIT_SERVER_WAITS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/refit_service.pb.h"

namespace refit {

// Answer callbacks of the two kinds of wait.
using PlanDone = std::function<void(absl::StatusOr<v1::AwaitPlanResponse>)>;
using KvDone = std::function<void(absl::StatusOr<std::string>)>;

// One parked call: a plan wait (plan_done set) or a KV wait (kv_done set).
struct Waiter {
  uint64_t id = 0;        // set by Waits::Add; later waits have higher ids
  std::string member_id;  // plan waits: whose plan
  int64_t min_epoch = 0;  // plan waits: the oldest acceptable plan epoch
  PlanDone plan_done;
  std::string key;  // KV waits
  KvDone kv_done;
  std::string caller;  // KV waits: who parked it (its address), for the bounds
  // KV waits: parked by a member of the current plan, whose waits only the
  // per-member bound limits (others cannot use up its room).
  bool planned = false;
  absl::Time deadline;

  // Answers with an error status (either kind).
  void Fail(const absl::Status& status) const {
    if (kv_done) {
      kv_done(status);
    } else {
      plan_done(status);
    }
  }
};

class Waits {
 public:
  // Names a wait; never 0.
  using Id = uint64_t;

  // Parks `w`; returns its id (also set in the parked w.id).
  Id Add(Waiter w);

  // Returns the id of the last wait parked (0: none yet).
  Id last_id() const { return next_ - 1; }

  // Removes wait `id` and ends it with CANCELLED; no-op when it was answered.
  void Cancel(Id id);

  // Ends the waits whose deadline is at or before `now` with
  // DEADLINE_EXCEEDED ("key K not set before the deadline", "no plan before
  // the deadline").
  // Plan waits end with "no plan before the deadline: <plan_why>" (why
  // there is none, e.g. "membership incomplete: trainer rank 1 left at
  // ..."), or without the suffix when plan_why is empty.
  void Expire(absl::Time now, const std::string& plan_why = "");

  // Offers every wait to `answer`, which answers it and returns true, or
  // returns false to leave it parked.
  void Wake(const std::function<bool(Waiter&)>& answer);

  // Offers the KV waits for `key` to `answer` (as Wake).
  void WakeKey(const std::string& key, const std::function<bool(Waiter&)>& answer);

  // Ends every wait with `status`.
  void EndAll(const absl::Status& status);

  // The bounds on parked KV waits (Coordinator options of the same names).
  struct KvLimits {
    int64_t max_total = 0;       // of members outside the plan, in all
    int64_t max_per_caller = 0;  // of members outside the plan, per address
    int64_t max_per_member = 0;  // of any member
  };

  // Returns OK when KV wait `w` (of member w.member_id) may be parked: the
  // member parks fewer than limits.max_per_member, and, unless w.planned
  // (a member of the current plan), fewer than max_total waits of members
  // outside the plan are parked and fewer than max_per_caller of them by
  // w.caller. Else RESOURCE_EXHAUSTED naming the key, the count and the
  // flag that sets the bound (--max_kv_waits, --max_kv_waits_per_caller,
  // --max_kv_waits_per_member).
  absl::Status KvRoom(const Waiter& w, const KvLimits& limits) const;

  // Returns the KV waits parked: in all, of members outside the plan by
  // `caller`, and of `member`.
  int64_t kv_waits() const { return kv_waits_; }
  int64_t kv_waits_of(const std::string& caller) const;
  int64_t kv_waits_of_member(const std::string& member) const;

 private:
  struct Entry {
    Waiter w;
    std::multimap<absl::Time, Id>::iterator by_deadline;
    std::multimap<std::string, Id>::iterator by_key;  // KV waits
  };
  // Removes `it` from every index and returns its waiter.
  Waiter Remove(std::map<Id, Entry>::iterator it);

  std::map<Id, Entry> waiters_;
  std::multimap<absl::Time, Id> by_deadline_;
  std::multimap<std::string, Id> by_key_;
  std::map<std::string, int64_t> kv_waits_by_caller_;  // unplanned waits
  std::map<std::string, int64_t> kv_waits_by_member_;
  int64_t kv_waits_ = 0;
  int64_t unplanned_kv_waits_ = 0;
  Id next_ = 1;
};

}  // namespace refit

#endif  // REFIT_SERVER_WAITS_H_
