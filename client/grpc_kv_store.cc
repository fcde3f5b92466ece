// GrpcKvStore over RefitClient's KvSet/KvGet.
#include "client/grpc_kv_store.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace refit {

absl::Status GrpcKvStore::Set(const std::string& key, const std::string& value) {
  return client_->KvSet(prefix_ + key, value, absl::Now() + absl::Seconds(30));
}

absl::StatusOr<std::string> GrpcKvStore::Get(const std::string& key,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // Waits in slices, so that a Cancel is seen between two of them.
  while (true) {
    absl::Status c = cancel_.status();
    if (!c.ok()) return c;
    const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(500));
    absl::StatusOr<std::string> v = client_->KvGet(prefix_ + key, slice);
    if (!absl::IsDeadlineExceeded(v.status()) || slice >= deadline) return v;
  }
}

void GrpcKvStore::Cancel(const absl::Status& reason) { cancel_.Cancel(reason); }

}  // namespace refit
