// PlanCache: plans built for memberships seen before, by the registrations'
// fingerprint, so that a member that leaves and comes back gets its old plan
// without planning again. Bounded in entries and in serialized slice bytes;
// oldest out first. Not thread-safe: its owner holds the lock.
#ifndef REFIT_SERVER_PLAN_CACHE_H_
#define REFIT_SERVER_PLAN_CACHE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/plan_function.h"

namespace refit {

class PlanCache {
 public:
  // A plan function's outcome, shared between the cache and the plan being
  // handed out (slices are never copied per member).
  using Entry = std::shared_ptr<const absl::StatusOr<BuiltPlan>>;

  // Keeps at most `max_entries` plans and at most `max_bytes` slice bytes,
  // except that the newest plan is kept even alone over the byte budget.
  PlanCache(int max_entries, int64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Returns the plan cached for `fingerprint`, or null.
  Entry Find(const std::string& fingerprint) const;

  // Caches `plan` under `fingerprint` (replacing an older one), evicting the
  // oldest plans until it fits.
  void Insert(const std::string& fingerprint, Entry plan);

  // Returns the number of plans cached and their slice bytes.
  int size() const { return static_cast<int>(order_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  void Erase(const std::string& fingerprint);

  struct Cached {
    Entry plan;
    int64_t bytes = 0;
  };
  const int max_entries_;
  const int64_t max_bytes_;
  std::map<std::string, Cached> plans_;
  std::deque<std::string> order_;  // oldest first
  int64_t bytes_ = 0;
};

}  // namespace refit

#endif  // REFIT_SERVER_PLAN_CACHE_H_
