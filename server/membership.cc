// Membership (see membership.h).
#include "server/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "server/registration.h"

namespace refit {

Membership::Group Membership::GroupOf(const v1::MemberIdentity& ident) {
  return {static_cast<int>(ident.side()), ident.engine_id()};
}

std::optional<int32_t> Membership::OtherWorldSize(const Group& group, const std::string& id,
                                                  int32_t world_size) const {
  auto g = world_sizes_.find(group);
  if (g == world_sizes_.end()) return std::nullopt;
  const Member* self = Find(id);
  for (const auto& [size, count] : g->second) {
    const bool own = self != nullptr && GroupOf(self->reg.identity()) == group &&
                     self->reg.identity().world_size() == size;
    if (size != world_size && count - (own ? 1 : 0) > 0) return size;
  }
  return std::nullopt;
}

void Membership::Count(const v1::MemberIdentity& ident, int delta) {
  const Group group = GroupOf(ident);
  auto& sizes = world_sizes_[group];
  if ((sizes[ident.world_size()] += delta) <= 0) sizes.erase(ident.world_size());
  if (sizes.empty()) world_sizes_.erase(group);
}

absl::StatusOr<Membership::Admitted> Membership::Admit(const v1::Registration& reg,
                                                       absl::Time now) {
  const v1::MemberIdentity& ident = reg.identity();
  const std::string id = MemberKey(ident);
  // Every member is of one job: any other member's job is theirs.
  for (auto o = members_.begin(); o != members_.end(); ++o) {
    if (o->first == id) continue;
    const std::string& job = o->second.reg.identity().job();
    if (job != ident.job()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "identity.job: ", ident.job(), " differs from job ", job, " already registered"));
    }
    break;
  }
  if (std::optional<int32_t> other = OtherWorldSize(GroupOf(ident), id, ident.world_size())) {
    // Name one member that registered it (a pass over the members, on this
    // error only).
    for (const auto& [oid, m] : members_) {
      const v1::MemberIdentity& o = m.reg.identity();
      if (oid != id && GroupOf(o) == GroupOf(ident) && o.world_size() == *other) {
        return absl::InvalidArgumentError(
            absl::StrCat("identity.world_size: ", ident.world_size(), " disagrees with ",
                         o.world_size(), " of ", DescribeMember(o)));
      }
    }
  }
  const std::string serialized = SerializeRegistration(reg);
  const int64_t size = static_cast<int64_t>(serialized.size());
  const uint64_t hash = Fnv1a64(serialized);
  auto it = members_.find(id);
  if (it != members_.end() && it->second.serialized_bytes == size &&
      it->second.serialized_hash == hash) {
    it->second.last_heartbeat = now;
    return Admitted::kSame;
  }
  const int64_t old_bytes = it == members_.end() ? 0 : it->second.serialized_bytes;
  const int64_t after = bytes_ - old_bytes + size;
  if (after > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "member ", DescribeMember(ident), ": its registration of ", size,
        " bytes would make the members' registrations ", after, " bytes, over refitd's limit ",
        max_bytes_, " (--max_registration_mib)"));
  }
  bytes_ = after;
  const Admitted result = it == members_.end() ? Admitted::kNew : Admitted::kReplaced;
  Member& m = members_[id];
  if (result == Admitted::kReplaced) Count(m.reg.identity(), -1);
  Count(ident, +1);
  m.id = id;
  m.reg = reg;
  m.serialized_bytes = size;
  m.serialized_hash = hash;
  m.last_heartbeat = now;
  ++epoch_;
  return result;
}

bool Membership::Remove(const std::string& id) {
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  bytes_ -= it->second.serialized_bytes;
  Count(it->second.reg.identity(), -1);
  members_.erase(it);
  ++epoch_;
  return true;
}

bool Membership::Touch(const std::string& id, absl::Time now) {
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  it->second.last_heartbeat = now;
  return true;
}

const Member* Membership::Find(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

std::vector<std::string> Membership::Expired(absl::Time now,
                                             absl::Duration timeout) const {
  std::vector<std::string> out;
  for (const auto& [id, m] : members_) {
    if (now - m.last_heartbeat > timeout) out.push_back(id);
  }
  return out;
}

std::optional<PlanInput> Membership::Complete() const {
  std::vector<const Member*> trainer;
  std::map<std::string, std::vector<const Member*>> engines;
  int trainer_world = -1;
  for (const auto& [id, m] : members_) {
    const v1::MemberIdentity& ident = m.reg.identity();
    if (ident.side() == v1::SIDE_TRAINER) {
      trainer.push_back(&m);
      trainer_world = ident.world_size();
    } else {
      engines[ident.engine_id()].push_back(&m);
    }
  }
  if (trainer_world <= 0 || static_cast<int>(trainer.size()) != trainer_world) {
    return std::nullopt;
  }
  auto by_rank = [](const Member* a, const Member* b) {
    return a->reg.identity().rank() < b->reg.identity().rank();
  };
  std::sort(trainer.begin(), trainer.end(), by_rank);
  std::vector<const Member*> engine;
  int complete = 0;
  for (auto& [eid, ms] : engines) {
    if (static_cast<int>(ms.size()) != ms[0]->reg.identity().world_size()) continue;
    std::sort(ms.begin(), ms.end(), by_rank);
    engine.insert(engine.end(), ms.begin(), ms.end());
    ++complete;
  }
  if (complete < min_engines_) return std::nullopt;
  PlanInput in;
  in.epoch = epoch_;
  std::vector<const v1::Registration*> all;
  for (const Member* m : trainer) {
    all.push_back(&m->reg);
    in.trainer.push_back(m->reg);
    in.ids.push_back(m->id);
  }
  for (const Member* m : engine) {
    all.push_back(&m->reg);
    in.engine.push_back(m->reg);
    in.ids.push_back(m->id);
  }
  in.fingerprint = FingerprintRegistrations(all);
  return in;
}

}  // namespace refit
