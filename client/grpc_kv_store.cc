// GrpcKvStore over RefitClient's KvSet/KvGet.
#include "client/grpc_kv_store.h"

namespace refit {

absl::Status GrpcKvStore::Set(const std::string& key, const std::string& value) {
  return client_->KvSet(prefix_ + key, value, absl::Now() + absl::Seconds(30));
}

absl::StatusOr<std::string> GrpcKvStore::Get(const std::string& key,
                                             absl::Duration timeout) {
  return client_->KvGet(prefix_ + key, absl::Now() + timeout);
}

}  // namespace refit
