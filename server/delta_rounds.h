// DeltaRounds: refitd's part of delta and verified rounds (docs/delta.md).
// Not thread-safe: the coordinator holds its lock.
//
// Delta: each engine member is known by its member id, which a restarted
// or rejoined process never reuses. A member that took part in the last
// committed round and in no aborted round since holds exactly that
// version's bytes, so the announcement lets trainers send it a delta
// against that version; every other engine rank (new, rejoined, torn by an
// aborted round, behind) gets -1: dense. Verified: the members' digest
// parts are added up per (engine rank, tensor) as reports arrive and
// compared before the commit; a mismatch fails the commit naming the
// engine rank and tensor.
#ifndef REFIT_SERVER_DELTA_ROUNDS_H_
#define REFIT_SERVER_DELTA_ROUNDS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "proto/refit_service.pb.h"

namespace refit {

class DeltaRounds {
 public:
  // `delta`: announce deltas; `verify_every`: verify every Nth dense round
  // (0: never; delta rounds are always verified).
  DeltaRounds(bool delta, int32_t verify_every)
      : delta_(delta), verify_every_(verify_every) {}

  // Fills ROUND_STARTED event `e` of round `version`: per engine rank (the
  // map's keys, 0..n-1) its member's delta base or -1, and whether the
  // round is verified. Clears the digests of an earlier round.
  void Announce(const std::map<int32_t, std::string>& engine_members, v1::RoundEvent* e);

  // Adds a success report's digest parts (`engine`: an engine member's).
  // `who` names the member in errors ("trainer rank 3").
  void AddReport(bool engine, const v1::ReportRequest& req,
                 absl::string_view who = "a member");

  // OK unless the round is verified and the parts disagree: DATA_LOSS
  // naming the engine rank and tensor (or the side that sent no part).
  absl::Status Check() const;

  // The round of `version` ended: committed (its participants hold it;
  // `engine_ids` of its engine members are verified when it was) or
  // aborted (its participants are torn).
  void End(bool committed, int64_t version, const std::set<std::string>& participants,
           const std::set<std::string>& engine_ids);

  // The last version a verified round proved engine `engine_id` holds.
  int64_t VerifiedVersion(const std::string& engine_id) const;

 private:
  const bool delta_;
  const int32_t verify_every_;
  int64_t rounds_ = 0;
  bool verify_ = false;  // the running round's
  int64_t committed_version_ = 0;
  std::set<std::string> holding_;  // members holding committed_version_
  std::map<std::pair<int32_t, int32_t>, uint64_t> trainer_sums_, engine_sums_;
  std::map<std::pair<int32_t, int32_t>, std::string> names_;
  std::map<std::string, int64_t> verified_;
  // The running round's digest scheme (ReportRequest.digest_scheme) and
  // who reported it first; the first member reporting another.
  uint32_t scheme_ = 0;
  std::string scheme_from_, scheme_error_;
};

}  // namespace refit

#endif  // REFIT_SERVER_DELTA_ROUNDS_H_
