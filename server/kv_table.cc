// KvTable (see kv_table.h).
#include "server/kv_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

std::string OwnerName(const std::string& owner) {
  return owner.empty() ? std::string("a caller naming no member")
                       : absl::StrCat("member ", owner);
}

}  // namespace

absl::Status KvTable::Set(const std::string& owner, const std::string& key,
                          std::string value) {
  int64_t old_bytes = 0;
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (it->second.owner != owner) {
      return absl::PermissionDeniedError(absl::StrCat(
          "key ", key, " belongs to ", OwnerName(it->second.owner), ", not ",
          OwnerName(owner)));
    }
    old_bytes = static_cast<int64_t>(key.size() + it->second.value.size());
  }
  const int64_t new_bytes = static_cast<int64_t>(key.size() + value.size());
  const int64_t owner_after = owner_bytes_[owner] - old_bytes + new_bytes;
  if (owner_after > quota_.per_owner_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value quota: ", OwnerName(owner), " would hold ", owner_after,
        " bytes, over the per-member quota of ", quota_.per_owner_bytes));
  }
  const int64_t total_after = total_bytes_ - old_bytes + new_bytes;
  if (total_after > quota_.total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value quota: setting ", key, " for ", OwnerName(owner),
        " would make the store hold ", total_after,
        " bytes, over the total quota of ", quota_.total_bytes));
  }
  owner_bytes_[owner] = owner_after;
  total_bytes_ = total_after;
  entries_[key] = Entry{owner, std::move(value)};
  return absl::OkStatus();
}

const std::string* KvTable::Find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.value;
}

void KvTable::DropOwner(const std::string& owner) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.owner == owner) {
      total_bytes_ -= static_cast<int64_t>(it->first.size() + it->second.value.size());
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  owner_bytes_.erase(owner);
}

}  // namespace refit
