// MemberCredentials: which secret may act for each member identity
// (job, side, engine id, rank), and the optional job key that proves a
// registrant belongs to the job. Not thread-safe: its owner holds the lock.
//
// Rules (docs/reliability.md, "Member identity"):
// - A member's identity is bound to the secret of the registration that
//   admitted it, until the member leaves or expires; while bound, a
//   registration with another secret is refused, whether or not the
//   member's round stream is open.
// - With a job key, a registrant must present it; one that does may take a
//   bound identity over (the member's restarted process).
// - A secret replaced by another one for an identity is retired: it can
//   never register or act for that identity again (a replay fails).
#ifndef REFIT_SERVER_MEMBER_CREDENTIALS_H_
#define REFIT_SERVER_MEMBER_CREDENTIALS_H_

#include <cstddef>
#include <deque>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace refit {

class MemberCredentials {
 public:
  // What a registration does to its identity.
  enum class Admission {
    kBind,      // the identity is free: bind it to the secret
    kSame,      // the holder of the secret registers again
    kTakeOver,  // a registrant with the job key replaces the holder
  };

  // Retired secrets remembered per identity, and identities remembered.
  static constexpr size_t kRetiredPerIdentity = 8;
  static constexpr size_t kMaxIdentities = 1 << 16;
  // The longest job key refitd takes (its --job_key_file and a
  // registration's job_key); a longer one is INVALID_ARGUMENT naming job_key.
  static constexpr size_t kMaxJobKeyBytes = 4096;

  // `job_key` empty: refitd has none (every registrant is taken at its
  // word; an identity is free again once its member left or expired).
  explicit MemberCredentials(std::string job_key) : job_key_(std::move(job_key)) {}

  bool has_job_key() const { return !job_key_.empty(); }

  // Decides a registration of identity `id` (`who` names it in messages)
  // with `secret` (not empty) and `job_key`. PERMISSION_DENIED naming
  // job_key when refitd has a key and `job_key` is not it (INVALID_ARGUMENT
  // when it is over kMaxJobKeyBytes, whether refitd has a key or not); naming the
  // member when `secret` was retired for it. When the identity is bound to
  // another secret and refitd has no job key: PERMISSION_DENIED while its
  // holder is `live` (its round stream is open), else UNAVAILABLE (retry:
  // the holder, e.g. a process that died, expires); both add `held_note`
  // (when the binding ends).
  absl::StatusOr<Admission> CheckRegister(const std::string& id, const std::string& who,
                                          const std::string& secret,
                                          const std::string& job_key, bool live,
                                          const std::string& held_note) const;

  // Binds `id` to `secret`; the secret it had before, if another, is retired.
  void Bind(const std::string& id, const std::string& secret);

  // Ends the binding of `id` (its member left or expired); its secret stays
  // its last one, so that the same process may register it again.
  void Unbind(const std::string& id);

  // OK when `id` is not bound or `secret` is its secret; else
  // PERMISSION_DENIED naming the member (`who`, `id`).
  absl::Status Check(const std::string& id, const std::string& who,
                     const std::string& secret) const;

  // Returns whether `id` is bound to a secret.
  bool IsBound(const std::string& id) const;

 private:
  struct Entry {
    std::string secret;  // the current or (unbound) last secret
    bool bound = false;
    std::deque<std::string> retired;  // newest last
  };

  const std::string job_key_;
  std::map<std::string, Entry> entries_;
};

}  // namespace refit

#endif  // REFIT_SERVER_MEMBER_CREDENTIALS_H_
