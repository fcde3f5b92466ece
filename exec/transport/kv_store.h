// KvStore: the small key-value store the data plane bootstraps through
// (NCCL unique ids, one per lane; Gloo rendezvous). refitd serves one over
// gRPC (client/); InMemoryKvStore serves tests and in-process runs.
#ifndef REFIT_EXEC_TRANSPORT_KV_STORE_H_
#define REFIT_EXEC_TRANSPORT_KV_STORE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace refit {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Stores value under key (overwrites). Fails with UNAVAILABLE if the store
  // cannot be reached.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;

  // Returns the value of key, waiting for it to be set for at most
  // `timeout`. Fails with DEADLINE_EXCEEDED naming the key when it is still
  // missing then, UNAVAILABLE if the store cannot be reached.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
};

// A thread-safe in-process store.
class InMemoryKvStore : public KvStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_KV_STORE_H_
