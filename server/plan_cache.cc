// PlanCache (see plan_cache.h).
#include "server/plan_cache.h"

#include <algorithm>

namespace refit {

PlanCache::Entry PlanCache::Find(const std::string& fingerprint) const {
  auto it = plans_.find(fingerprint);
  return it == plans_.end() ? nullptr : it->second.plan;
}

void PlanCache::Erase(const std::string& fingerprint) {
  auto it = plans_.find(fingerprint);
  if (it == plans_.end()) return;
  bytes_ -= it->second.bytes;
  plans_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), fingerprint));
}

void PlanCache::Insert(const std::string& fingerprint, Entry plan) {
  Erase(fingerprint);
  int64_t bytes = 0;
  if (plan->ok()) {
    for (const auto* v : {&(*plan)->trainer_slices, &(*plan)->engine_slices}) {
      for (const std::string& p : *v) bytes += static_cast<int64_t>(p.size());
    }
    for (const auto* v : {&(*plan)->trainer_bounds, &(*plan)->engine_bounds}) {
      for (const SliceBounds& b : *v) {
        bytes += static_cast<int64_t>(sizeof(b) + b.digest_keys.size() * sizeof(b.digest_keys[0]));
      }
    }
  }
  while (!order_.empty() && (static_cast<int>(order_.size()) >= max_entries_ ||
                             bytes_ + bytes > max_bytes_)) {
    Erase(order_.front());
  }
  plans_[fingerprint] = Cached{std::move(plan), bytes};
  order_.push_back(fingerprint);
  bytes_ += bytes;
}

}  // namespace refit
