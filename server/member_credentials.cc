// MemberCredentials (see member_credentials.h).
#include "server/member_credentials.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/constant_time.h"
#include "common/member_secret.h"

namespace refit {

absl::StatusOr<MemberCredentials::Admission> MemberCredentials::CheckRegister(
    const std::string& id, const std::string& who, const std::string& secret,
    const std::string& job_key, bool live, const std::string& held_note) const {
  if (job_key.size() > kMaxJobKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_key: ", job_key.size(), " bytes; at most ", kMaxJobKeyBytes));
  }
  if (has_job_key() && !ConstantTimeEquals(job_key, job_key_)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job_key: ", job_key.empty() ? "missing" : "wrong",
        "; this refitd admits only members given its job key (--job_key_file)"));
  }
  auto it = entries_.find(id);
  if (it == entries_.end()) return Admission::kBind;
  const Entry& e = it->second;
  for (const std::string& old : e.retired) {
    if (ConstantTimeEquals(old, secret)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "member ", who, " (", id,
          "): this member secret was replaced by a newer registration of the member; "
          "the process holding it can no longer register or act for it"));
    }
  }
  if (ConstantTimeEquals(e.secret, secret)) return e.bound ? Admission::kSame : Admission::kBind;
  if (!e.bound) return Admission::kBind;
  if (has_job_key()) return Admission::kTakeOver;
  const std::string why = absl::StrCat(
      "member ", who, " (", id,
      ") is registered with another member secret; only the process holding it may "
      "register it again, until the member leaves or expires",
      held_note.empty() ? "" : absl::StrCat(" (", held_note, ")"),
      ". With a job key (refitd --job_key_file, and the same key given to the "
      "members), a restarted member process takes its place at once");
  if (live) return absl::PermissionDeniedError(why);
  return absl::UnavailableError(
      absl::StrCat(why, "; its round stream is closed: retry once it expired"));
}

void MemberCredentials::Bind(const std::string& id, const std::string& secret) {
  if (entries_.size() >= kMaxIdentities && entries_.count(id) == 0) {
    // Forget an identity no member holds now (the oldest key in order).
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!it->second.bound) {
        entries_.erase(it);
        break;
      }
    }
  }
  Entry& e = entries_[id];
  if (!e.secret.empty() && !ConstantTimeEquals(e.secret, secret)) {
    e.retired.push_back(e.secret);
    while (e.retired.size() > kRetiredPerIdentity) e.retired.pop_front();
  }
  e.secret = secret;
  e.bound = true;
}

void MemberCredentials::Unbind(const std::string& id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.bound = false;
}

bool MemberCredentials::IsBound(const std::string& id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.bound;
}

absl::Status MemberCredentials::Check(const std::string& id, const std::string& who,
                                      const std::string& secret) const {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.bound || ConstantTimeEquals(it->second.secret, secret)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "member ", who, " (", id, "): ",
      secret.empty() ? "the call carries no member secret"
                     : "the call carries another member secret",
      "; only the member itself may act for it or read its data"));
}

}  // namespace refit
