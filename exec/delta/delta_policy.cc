// DeltaPolicy: dense or delta per engine rank, from committed versions and
// torn state.
#include "exec/delta/delta_policy.h"

#include "absl/strings/str_cat.h"

namespace refit {

std::string EngineDeltaModeText(const EngineDeltaMode& m) {
  return m.dense ? "dense" : absl::StrCat("delta against version ", m.base_version);
}

std::vector<int64_t> DeltaBases(const std::vector<EngineDeltaMode>& modes) {
  std::vector<int64_t> bases;
  for (const EngineDeltaMode& m : modes) bases.push_back(m.dense ? -1 : m.base_version);
  return bases;
}

DeltaPolicy::DeltaPolicy(int32_t engine_world_size)
    : committed_(engine_world_size > 0 ? engine_world_size : 0, -1),
      torn_(committed_.size(), false) {}

std::vector<EngineDeltaMode> DeltaPolicy::Announce(bool delta_enabled) const {
  std::vector<EngineDeltaMode> out(committed_.size());
  for (size_t e = 0; e < committed_.size(); ++e) {
    if (delta_enabled && snapshot_version_ >= 0 && !torn_[e] &&
        committed_[e] == snapshot_version_) {
      out[e] = EngineDeltaMode{false, snapshot_version_};
    }
  }
  return out;
}

absl::Status DeltaPolicy::OnEngineJoined(int32_t rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= committed_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine rank ", rank, " outside engine world size ", committed_.size()));
  }
  committed_[rank] = -1;
  torn_[rank] = false;
  return absl::OkStatus();
}

void DeltaPolicy::OnCommit(int64_t version) {
  snapshot_version_ = version;
  for (size_t e = 0; e < committed_.size(); ++e) {
    committed_[e] = version;
    torn_[e] = false;
  }
}

void DeltaPolicy::OnAbort() {
  for (size_t e = 0; e < torn_.size(); ++e) torn_[e] = true;
}

}  // namespace refit
