// GrpcKvStore: the data plane's KvStore served by refitd's key-value RPCs.
#ifndef REFIT_CLIENT_GRPC_KV_STORE_H_
#define REFIT_CLIENT_GRPC_KV_STORE_H_

#include <string>

#include "client/refit_client.h"
#include "common/cancellation.h"
#include "exec/transport/kv_store.h"

namespace refit {

class GrpcKvStore : public KvStore {
 public:
  // `client` must outlive the store. `prefix` (e.g. the plan's kv_prefix) is
  // prepended to every key.
  GrpcKvStore(RefitClient* client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  // UNAVAILABLE when refitd cannot be reached.
  absl::Status Set(const std::string& key, const std::string& value) override;
  // DEADLINE_EXCEEDED naming the key when it is not set within `timeout`;
  // the reason given to Cancel within ~0.5 s of it.
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

  // Makes Gets in progress (from another thread) and later ones fail with
  // `reason`: a peer whose key will never come (it died; refitd aborted the
  // round) must not hold the others until their deadline. Thread-safe.
  void Cancel(const absl::Status& reason);

 private:
  RefitClient* client_;
  std::string prefix_;
  Cancellation cancel_{"key-value store cancelled"};
};

}  // namespace refit

#endif  // REFIT_CLIENT_GRPC_KV_STORE_H_
