// Membership (see membership.h).
#include "server/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/registration.h"

namespace refit {

absl::StatusOr<Membership::Admitted> Membership::Admit(const v1::Registration& reg,
                                                       absl::Time now) {
  const v1::MemberIdentity& ident = reg.identity();
  const std::string id = MemberKey(ident);
  for (const auto& [oid, m] : members_) {
    const v1::MemberIdentity& o = m.reg.identity();
    if (oid == id) continue;
    if (o.side() == ident.side() && o.job() == ident.job() &&
        o.engine_id() == ident.engine_id() && o.world_size() != ident.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("identity.world_size: ", ident.world_size(), " disagrees with ",
                       o.world_size(), " of ", DescribeMember(o)));
    }
    if (o.job() != ident.job()) {
      return absl::InvalidArgumentError(absl::StrCat("identity.job: ", ident.job(),
                                                     " differs from job ", o.job(),
                                                     " already registered"));
    }
  }
  std::string serialized = SerializeRegistration(reg);
  auto it = members_.find(id);
  if (it != members_.end() && it->second.serialized == serialized) {
    it->second.last_heartbeat = now;
    return Admitted::kSame;
  }
  const int64_t old_bytes =
      it == members_.end() ? 0 : static_cast<int64_t>(it->second.serialized.size());
  const int64_t after = bytes_ - old_bytes + static_cast<int64_t>(serialized.size());
  if (after > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "member ", DescribeMember(ident), ": its registration of ", serialized.size(),
        " bytes would make the members' registrations ", after, " bytes, over refitd's limit ",
        max_bytes_, " (--max_registration_mib)"));
  }
  bytes_ = after;
  const Admitted result = it == members_.end() ? Admitted::kNew : Admitted::kReplaced;
  Member& m = members_[id];
  m.id = id;
  m.reg = reg;
  m.serialized = std::move(serialized);
  m.last_heartbeat = now;
  ++epoch_;
  return result;
}

bool Membership::Remove(const std::string& id) {
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  bytes_ -= static_cast<int64_t>(it->second.serialized.size());
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
