#include "exec/transport/kv_store.h"

#include "absl/strings/str_cat.h"

namespace refit {

absl::Status InMemoryKvStore::Set(const std::string& key,
                                  const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryKvStore::Get(const std::string& key,
                                                 absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.count(key) > 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "key \"", key, "\" was not set within ", absl::FormatDuration(timeout)));
  }
  return values_[key];
}

}  // namespace refit
