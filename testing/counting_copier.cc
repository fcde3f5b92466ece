#include "testing/counting_copier.h"

#include <algorithm>
#include <utility>

namespace refit::testing {

CountingCopier::CountingCopier(std::unique_ptr<Copier> inner)
    : inner_(inner != nullptr ? std::move(inner) : MakeHostCopier()) {}

int64_t CountingCopier::held_bytes() const {
  absl::MutexLock l(&mu_);
  return held_;
}

int64_t CountingCopier::peak_bytes() const {
  absl::MutexLock l(&mu_);
  return peak_;
}

absl::StatusOr<char*> CountingCopier::Allocate(int64_t bytes) {
  absl::StatusOr<char*> p = inner_->Allocate(bytes);
  if (!p.ok()) return p;
  absl::MutexLock l(&mu_);
  sizes_[*p] = bytes;
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return p;
}

void CountingCopier::Free(char* p) {
  {
    absl::MutexLock l(&mu_);
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      held_ -= it->second;
      sizes_.erase(it);
    }
  }
  inner_->Free(p);
}

}  // namespace refit::testing
