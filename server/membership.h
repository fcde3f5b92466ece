// Membership: the registered members, their heartbeats and the membership
// epoch (bumped on every change), and the complete membership a plan is
// built from. Not thread-safe: its owner holds the lock.
#ifndef REFIT_SERVER_MEMBERSHIP_H_
#define REFIT_SERVER_MEMBERSHIP_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/refit_service.pb.h"

namespace refit {

struct Member {
  std::string id;  // MemberKey(reg.identity())
  v1::Registration reg;
  // The size and hash (common/hash.h Fnv1a64) of SerializeRegistration(reg):
  // a registration with both equal is an identical retry. Only the member's
  // own process (its secret, or the job key) registers it again, so a
  // crafted collision fools no one but its sender.
  int64_t serialized_bytes = 0;
  uint64_t serialized_hash = 0;
  absl::Time last_heartbeat;
};

// A complete membership in plan order, copied out so that a plan can be built
// without the lock.
struct PlanInput {
  int64_t epoch = 0;        // the membership epoch it was taken at
  std::string fingerprint;  // FingerprintRegistrations of trainer + engine
  std::vector<v1::Registration> trainer;  // by rank
  std::vector<v1::Registration> engine;   // by (engine id, rank)
  std::vector<std::string> ids;           // member ids: trainer, then engine
};

class Membership {
 public:
  // What Admit did.
  enum class Admitted {
    kNew,       // a new member
    kReplaced,  // a member re-registered with other metadata
    kSame,      // an identical retry: only its heartbeat was refreshed
  };

  // A plan needs the whole trainer and at least `min_engines` complete
  // engine replicas. The members' registrations hold at most `max_bytes`
  // serialized bytes in all (refitd holds one job at a time: also per job).
  explicit Membership(int min_engines,
                      int64_t max_bytes = std::numeric_limits<int64_t>::max())
      : min_engines_(min_engines), max_bytes_(max_bytes) {}

  // Adds or replaces the member `reg` names (a validated registration) at
  // time `now`; bumps the epoch unless kSame. Fails with INVALID_ARGUMENT
  // when it names another job than the members there, or a world size its
  // side (or replica) disagrees with; RESOURCE_EXHAUSTED naming
  // --max_registration_mib when the registrations would hold more than
  // max_bytes.
  absl::StatusOr<Admitted> Admit(const v1::Registration& reg, absl::Time now);

  // Removes member `id`; returns false (and changes nothing) when unknown.
  bool Remove(const std::string& id);

  // Records a heartbeat of member `id` at `now`; returns false when unknown.
  bool Touch(const std::string& id, absl::Time now);

  // Returns member `id`, or null.
  const Member* Find(const std::string& id) const;

  // Returns the members whose last heartbeat is more than `timeout` before
  // `now`.
  std::vector<std::string> Expired(absl::Time now, absl::Duration timeout) const;

  // Returns the complete membership (the whole trainer, each complete engine
  // replica; at least min_engines of them), or nullopt when incomplete.
  std::optional<PlanInput> Complete() const;

  // Returns the members by id.
  const std::map<std::string, Member>& members() const { return members_; }

  // Returns the serialized bytes of every member's registration.
  int64_t bytes() const { return bytes_; }

  // Returns the membership epoch: 0 at first, +1 on every change.
  int64_t epoch() const { return epoch_; }

 private:
  // A side and replica (engine id; empty for the trainer) and the world
  // sizes its members registered, with how many registered each.
  using Group = std::pair<int, std::string>;
  static Group GroupOf(const v1::MemberIdentity& ident);
  // Returns the world size other than `world_size` that a member of
  // `group` other than `id` registered, or nullopt.
  std::optional<int32_t> OtherWorldSize(const Group& group, const std::string& id,
                                        int32_t world_size) const;
  void Count(const v1::MemberIdentity& ident, int delta);

  const int min_engines_;
  const int64_t max_bytes_;
  std::map<std::string, Member> members_;
  // Kept with members_, so that Admit checks a registration against the
  // others without a pass over every member.
  std::map<Group, std::map<int32_t, int>> world_sizes_;
  int64_t bytes_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace refit

#endif  // REFIT_SERVER_MEMBERSHIP_H_
