// Refusals (see refusals.h).
#include "server/refusals.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "server/bounded_text.h"

namespace refit {

absl::Status Refusals::Add(const std::string& id, const std::string& job,
                           const std::string& who, const std::string& reason,
                           absl::Time now) {
  if (reason.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("refusal of ", who, ": the reason is empty"));
  }
  auto old = entries_.find(id);
  if (old != entries_.end() && old->second.job != job) Erase(old);
  if (entries_.count(id) == 0) {
    if (entries_.size() >= max_entries_ && !GiveWayTo(job)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "refusal of ", who, ": refitd holds ", entries_.size(),
          " refusals, its limit (--max_members)"));
    }
    auto n = per_job_.find(job);
    if (n != per_job_.end() && n->second >= kMaxPerJob) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "refusal of ", who, ": refitd holds ", n->second, " refusals of its job, the limit"));
    }
    ++per_job_[job];
  }
  // Cut the raw text first: escaping may make it up to 4 times longer.
  entries_[id] = Entry{job, Printable(who),
                       BoundedText(Printable(BoundedText(reason, kMaxRefusalReasonBytes)),
                                   kMaxRefusalReasonBytes),
                       now};
  return absl::OkStatus();
}

bool Refusals::GiveWayTo(const std::string& job) {
  auto own = per_job_.find(job);
  const size_t own_count = own == per_job_.end() ? 0 : own->second;
  auto most = std::max_element(per_job_.begin(), per_job_.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  if (most == per_job_.end() || most->second <= own_count) return false;
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.job == most->first &&
        (oldest == entries_.end() || it->second.at < oldest->second.at)) {
      oldest = it;
    }
  }
  Erase(oldest);
  return true;
}

std::map<std::string, Refusals::Entry>::iterator Refusals::Erase(
    std::map<std::string, Entry>::iterator it) {
  auto n = per_job_.find(it->second.job);
  if (n != per_job_.end() && --n->second == 0) per_job_.erase(n);
  return entries_.erase(it);
}

bool Refusals::Clear(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  Erase(it);
  return true;
}

size_t Refusals::Expire(absl::Time now, absl::Duration ttl) {
  size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->second.at > ttl) {
      it = Erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

absl::Status Refusals::AsPlanError(const std::string& job) const {
  auto count = per_job_.find(job);
  if (count == per_job_.end()) return absl::OkStatus();
  std::string msg;
  size_t named = 0;
  for (const auto& [id, e] : entries_) {
    if (named == kNamedInError) break;
    if (e.job != job) continue;
    absl::StrAppend(&msg, named == 0 ? "" : "; ", e.who, " refused to join: ",
                    BoundedText(e.reason, kMaxErrorBytes / kNamedInError - 128));
    ++named;
  }
  if (count->second > named) {
    absl::StrAppend(&msg, "; and ", count->second - named, " more members refused");
  }
  return absl::FailedPreconditionError(BoundedText(msg, kMaxErrorBytes));
}

std::vector<std::string> Refusals::Describe() const {
  std::vector<std::string> out;
  for (const auto& [id, e] : entries_) {
    if (out.size() == kListed) {
      out.push_back(absl::StrCat("and ", entries_.size() - kListed, " more refusals"));
      break;
    }
    out.push_back(absl::StrCat(e.who, ": ", e.reason));
  }
  return out;
}

}  // namespace refit
