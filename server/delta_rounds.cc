// DeltaRounds: the delta announcement and the verified round's comparison.
#include "server/delta_rounds.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace refit {

void DeltaRounds::Announce(const std::map<int32_t, std::string>& engine_members,
                           v1::RoundEvent* e, bool dense) {
  ++rounds_;
  const bool delta = delta_ && !dense;
  verify_ = delta || (verify_every_ > 0 && rounds_ % verify_every_ == 0);
  plane_ = delta || verify_every_ > 0;
  trainer_sums_.clear();
  engine_sums_.clear();
  names_.clear();
  covered_.clear();
  scheme_from_.clear();
  scheme_error_.clear();
  e->set_verify(verify_);
  e->set_delta_plane(plane_);
  if (!delta) return;
  int32_t next = 0;
  for (const auto& [rank, id] : engine_members) {
    for (; next < rank; ++next) e->add_delta_base(-1);  // a rank nobody holds
    e->add_delta_base(committed_version_ > 0 && holding_.count(id) ? committed_version_ : -1);
    next = rank + 1;
  }
}

absl::Status DeltaRounds::CheckParts(bool engine, int32_t engine_rank,
                                     const SliceBounds* bounds,
                                     const v1::ReportRequest& req,
                                     absl::string_view who) const {
  if (!verify_ || req.digests_size() == 0) return absl::OkStatus();
  who = who.substr(0, 256);
  if (bounds != nullptr &&
      static_cast<size_t>(req.digests_size()) > bounds->digest_keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digests: ", who, " sent ", req.digests_size(), " digest parts; its plan slice writes ",
        bounds->digest_keys.size(), " (engine rank, tensor) places"));
  }
  std::vector<std::pair<int32_t, int32_t>> seen;
  seen.reserve(req.digests_size());
  for (const v1::DigestPart& p : req.digests()) {
    const std::pair<int32_t, int32_t> k{p.engine_rank(), p.tensor()};
    const bool own_rank = !engine || k.first == engine_rank;
    const bool in_slice =
        bounds == nullptr ||
        std::binary_search(bounds->digest_keys.begin(), bounds->digest_keys.end(), k);
    if (!own_rank || !in_slice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "digests: ", who, " sent a digest part for engine rank ", k.first, " tensor #",
          k.second, ", which its plan slice does not write"));
    }
    seen.push_back(k);
  }
  std::sort(seen.begin(), seen.end());
  auto twice = std::adjacent_find(seen.begin(), seen.end());
  if (twice != seen.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digests: ", who, " sent two digest parts for engine rank ", twice->first,
        " tensor #", twice->second));
  }
  return absl::OkStatus();
}

void DeltaRounds::AddReport(const std::string& id, bool engine, const SliceBounds* bounds,
                            const v1::ReportRequest& req, absl::string_view who) {
  if (!verify_) return;
  if (req.digests_size() > 0) {
    // Scheme 0 is the first definition (members built before the field).
    const uint32_t scheme = std::max<uint32_t>(req.digest_scheme(), 1);
    if (scheme_from_.empty()) {
      scheme_ = scheme;
      scheme_from_ = std::string(who.substr(0, 256));
    } else if (scheme != scheme_ && scheme_error_.empty()) {
      scheme_error_ = absl::StrCat(
          "verify: ", who.substr(0, 256), " digests by definition ", scheme, " but ",
          scheme_from_, " by definition ", scheme_,
          ": the members run different refit builds; run one refit version on every member");
    }
  }
  for (const v1::DigestPart& p : req.digests()) {
    const std::pair<int32_t, int32_t> k{p.engine_rank(), p.tensor()};
    (engine ? engine_sums_ : trainer_sums_)[k] += p.sum();
    if (engine && !p.tensor_name().empty()) names_[k] = p.tensor_name().substr(0, 256);
  }
  // A member that cannot digest (its data plane has no digests) proves
  // nothing; one that covered its whole slice proves its bytes.
  const bool covered = bounds != nullptr
                           ? static_cast<size_t>(req.digests_size()) == bounds->digest_keys.size()
                           : req.digests_size() > 0;
  if (engine && covered) covered_.insert(id);
}

absl::Status DeltaRounds::Check() const {
  if (!verify_) return absl::OkStatus();
  if (!scheme_error_.empty()) return absl::FailedPreconditionError(scheme_error_);
  auto name = [&](const std::pair<int32_t, int32_t>& k) {
    auto it = names_.find(k);
    return it != names_.end() ? it->second : absl::StrCat("#", k.second);
  };
  for (const auto& [k, v] : trainer_sums_) {
    auto it = engine_sums_.find(k);
    if (it == engine_sums_.end()) {
      return absl::DataLossError(absl::StrCat("verify: engine rank ", k.first, " tensor ",
                                              name(k), ": no digest from the engine"));
    }
    if (it->second != v) {
      return absl::DataLossError(absl::StrCat(
          "verify: engine rank ", k.first, " tensor ", name(k), ": the engine holds digest ",
          it->second, " but the trainers sent ", v));
    }
  }
  for (const auto& [k, v] : engine_sums_) {
    if (trainer_sums_.count(k) == 0) {
      return absl::DataLossError(absl::StrCat("verify: engine rank ", k.first, " tensor ",
                                              name(k), ": no digest from the trainers"));
    }
  }
  return absl::OkStatus();
}

void DeltaRounds::End(bool committed, int64_t version,
                      const std::set<std::string>& participants,
                      const std::map<std::string, std::vector<std::string>>& engines) {
  if (committed && !plane_) {
    // A round off the delta plane refreshed no trainer's snapshot: the
    // next delta round is dense.
    holding_.clear();
  } else if (committed) {
    committed_version_ = version;
    holding_ = participants;
    if (verify_) {
      for (const auto& [engine_id, members] : engines) {
        const bool all = std::all_of(members.begin(), members.end(), [&](const std::string& m) {
          return covered_.count(m) > 0;
        });
        if (all && !members.empty()) verified_[engine_id] = version;
      }
    }
  } else {
    for (const std::string& id : participants) holding_.erase(id);
  }
  verify_ = false;
  covered_.clear();
}

int64_t DeltaRounds::VerifiedVersion(const std::string& engine_id) const {
  auto it = verified_.find(engine_id);
  return it == verified_.end() ? 0 : it->second;
}

}  // namespace refit
