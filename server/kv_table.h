// KvTable: refitd's key-value store (the data plane's bootstrap values),
// with each key's owner recorded and quotas per owner and in total, so that
// one member cannot fill refitd's memory or overwrite another's keys.
#ifndef REFIT_SERVER_KV_TABLE_H_
#define REFIT_SERVER_KV_TABLE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace refit {

class KvTable {
 public:
  struct Quota {
    int64_t per_owner_bytes = int64_t{16} << 20;  // keys + values of one owner
    int64_t total_bytes = int64_t{512} << 20;     // of all owners
  };

  explicit KvTable(Quota quota) : quota_(quota) {}

  // Sets `key` to `value` for `owner` (a member id; "" for a caller that
  // names none). Fails with PERMISSION_DENIED naming the key and its owner
  // when another owner set it; RESOURCE_EXHAUSTED naming the owner and the
  // quota when the owner's bytes or the total would exceed it.
  absl::Status Set(const std::string& owner, const std::string& key,
                   std::string value);

  // Returns the value of `key`, or nullptr when it is not set.
  const std::string* Find(const std::string& key) const;

  // Drops every key of `owner` (a member that left).
  void DropOwner(const std::string& owner);

  int64_t total_bytes() const { return total_bytes_; }

 private:
  struct Entry {
    std::string owner;
    std::string value;
  };
  const Quota quota_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, int64_t> owner_bytes_;
  int64_t total_bytes_ = 0;
};

}  // namespace refit

#endif  // REFIT_SERVER_KV_TABLE_H_
