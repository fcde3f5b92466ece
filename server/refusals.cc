// Refusals (see refusals.h).
#include "server/refusals.h"

#include "absl/strings/str_cat.h"
#include "server/bounded_text.h"

namespace refit {

absl::Status Refusals::Add(const std::string& id, const std::string& who,
                           const std::string& reason, absl::Time now) {
  if (reason.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("refusal of ", who, ": the reason is empty"));
  }
  if (entries_.count(id) == 0 && entries_.size() >= max_entries_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "refusal of ", who, ": refitd holds ", entries_.size(),
        " refusals, its limit (--max_members)"));
  }
  entries_[id] = Entry{who, BoundedText(reason), now};
  return absl::OkStatus();
}

bool Refusals::Clear(const std::string& id) { return entries_.erase(id) > 0; }

size_t Refusals::Expire(absl::Time now, absl::Duration ttl) {
  size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->second.at > ttl) {
      it = entries_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

absl::Status Refusals::AsPlanError() const {
  if (entries_.empty()) return absl::OkStatus();
  std::string msg;
  size_t named = 0;
  for (const auto& [id, e] : entries_) {
    if (named == kNamedInError) break;
    absl::StrAppend(&msg, named == 0 ? "" : "; ", e.who, " refused to join: ", e.reason);
    ++named;
  }
  if (entries_.size() > named) {
    absl::StrAppend(&msg, "; and ", entries_.size() - named, " more members refused");
  }
  return absl::FailedPreconditionError(msg);
}

std::vector<std::string> Refusals::Describe() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(absl::StrCat(e.who, ": ", e.reason));
  return out;
}

}  // namespace refit
