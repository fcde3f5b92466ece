// DeltaRounds: refitd's part of delta and verified rounds (docs/delta.md).
// Not thread-safe: the coordinator holds its lock.
//
// Delta: each engine member process is known by its member id until the
// coordinator says it is a new process (Forget: it left, expired, was
// taken over or re-registered). A member that took part in the last
// committed round, in no aborted round since and is the same process holds
// exactly that version's bytes, so the announcement lets trainers send it a
// delta against that version, at its plan engine rank; every other engine
// rank (new process, torn by an aborted round, behind) gets -1: dense.
// Verified: the members' digest parts, each checked against the sender's
// own plan slice (CheckParts), are added up per (engine rank, tensor) as
// first reports arrive and compared before the commit; a mismatch fails the
// commit naming the engine rank and tensor. An engine is verified by a
// round only when each of its members' parts covered its slice and agreed.
#ifndef REFIT_SERVER_DELTA_ROUNDS_H_
#define REFIT_SERVER_DELTA_ROUNDS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/refit_service.pb.h"
#include "server/plan_function.h"

namespace refit {

class DeltaRounds {
 public:
  // `delta`: announce deltas; `verify_every`: verify every Nth dense round
  // (0: never; delta rounds are always verified).
  DeltaRounds(bool delta, int32_t verify_every)
      : delta_(delta), verify_every_(verify_every) {}

  // Fills ROUND_STARTED event `e` of round `version`: per plan engine rank
  // (the map's keys, ascending from 0) its member's delta base or -1, and
  // whether the round is verified. With `dense` (delta cannot win on the
  // plan's members: plan/host_delta.h) the round runs as without delta:
  // no bases, verified every verify_every rounds, and off the delta plane
  // unless verify_every is set (then the next delta round starts dense).
  // Clears the digests of an earlier round.
  void Announce(const std::map<int32_t, std::string>& engine_members, v1::RoundEvent* e,
                bool dense = false);

  // Member `id` is a new process (it registered anew, left, expired or was
  // taken over): it holds no version's bytes, and gets dense bytes.
  void Forget(const std::string& id) { holding_.erase(id); }

  // Checks a success report's digest parts against the sender's plan slice
  // before anything of it is recorded: OK when the round is not verified
  // (parts are then ignored) or every part names a place `bounds` (the
  // slice's; null: unknown) writes, at most once; INVALID_ARGUMENT naming
  // `digests` and `who` when there are more parts than the slice writes, a
  // part names another engine rank or tensor (an engine member's parts
  // must name its own `engine_rank`), or one place twice.
  absl::Status CheckParts(bool engine, int32_t engine_rank, const SliceBounds* bounds,
                          const v1::ReportRequest& req,
                          absl::string_view who = "a member") const;

  // Adds member `id`'s first success report's (CheckParts said OK) digest
  // parts (`engine`: an engine member's, whose slice is `bounds`). `who`
  // names the member in errors ("trainer rank 3").
  void AddReport(const std::string& id, bool engine, const SliceBounds* bounds,
                 const v1::ReportRequest& req, absl::string_view who = "a member");

  // OK unless the round is verified and the parts disagree: DATA_LOSS
  // naming the engine rank and tensor (or the side that sent no part).
  absl::Status Check() const;

  // The round of `version` ended: committed (its participants hold it;
  // each engine of `engines` (engine id -> its participating members) is
  // verified when the round was and each of those members' parts covered
  // its slice) or aborted (its participants are torn).
  void End(bool committed, int64_t version, const std::set<std::string>& participants,
           const std::map<std::string, std::vector<std::string>>& engines);

  // The last version a verified round proved engine `engine_id` holds.
  int64_t VerifiedVersion(const std::string& engine_id) const;

 private:
  const bool delta_;
  const int32_t verify_every_;
  int64_t rounds_ = 0;
  bool verify_ = false;  // the running round's
  bool plane_ = false;   // the running round's: on the delta plane
  int64_t committed_version_ = 0;
  std::set<std::string> holding_;  // members holding committed_version_
  std::map<std::pair<int32_t, int32_t>, uint64_t> trainer_sums_, engine_sums_;
  std::map<std::pair<int32_t, int32_t>, std::string> names_;
  std::map<std::string, int64_t> verified_;
  std::set<std::string> covered_;  // engine members whose parts covered their slice
  // The running round's digest scheme (ReportRequest.digest_scheme) and
  // who reported it first; the first member reporting another.
  uint32_t scheme_ = 0;
  std::string scheme_from_, scheme_error_;
};

}  // namespace refit

#endif  // REFIT_SERVER_DELTA_ROUNDS_H_
