#include "testing/counting_copy_engine.h"

#include <algorithm>
#include <utility>

namespace refit::testing {

CountingCopyEngine::CountingCopyEngine(std::unique_ptr<CopyEngine> inner)
    : inner_(inner != nullptr ? std::move(inner) : MakeHostCopyEngine()) {}

int64_t CountingCopyEngine::held_bytes() const {
  absl::MutexLock l(&mu_);
  return held_;
}

int64_t CountingCopyEngine::peak_bytes() const {
  absl::MutexLock l(&mu_);
  return peak_;
}

absl::StatusOr<char*> CountingCopyEngine::Allocate(int64_t bytes) {
  absl::StatusOr<char*> p = inner_->Allocate(bytes);
  if (!p.ok()) return p;
  absl::MutexLock l(&mu_);
  sizes_[*p] = bytes;
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return p;
}

void CountingCopyEngine::Free(char* p) {
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
