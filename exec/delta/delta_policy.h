// DeltaPolicy: which engine ranks may get a delta in the next round, from
// what the control plane knows of them (refitd holds one per job).
//
// A delta is the change between the trainers' snapshot (the bytes of the
// last committed version) and the current bytes; applying it is right only
// where the engine holds exactly the snapshot's bytes. So an engine rank
// gets a delta only when its committed version equals the snapshot's and
// no aborted round has touched it since; every other engine rank (new,
// rejoined or restarted, torn by an aborted round, behind) gets dense bytes
// for every message it receives. A commit brings every engine rank of the
// round and the snapshot to the round's version; an abort leaves the
// snapshot where it was and marks every engine rank of the round torn, so
// the retry is dense for them and repairs them.
#ifndef REFIT_EXEC_DELTA_DELTA_POLICY_H_
#define REFIT_EXEC_DELTA_DELTA_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace refit {

// The decision for one engine rank, part of a round's announcement.
struct EngineDeltaMode {
  bool dense = true;
  // When !dense: the version whose bytes the engine holds and the trainer
  // snapshot must hold too; the trainer sends dense if its snapshot is of
  // another version.
  int64_t base_version = -1;
  friend bool operator==(const EngineDeltaMode& a, const EngineDeltaMode& b) {
    return a.dense == b.dense && a.base_version == b.base_version;
  }
};

// "dense" or "delta against version V".
std::string EngineDeltaModeText(const EngineDeltaMode& m);

// The announcement as a round's start takes it (exec/round_runner.h:
// RoundStart::delta_base): per engine rank, a delta's base version, or -1
// for dense.
std::vector<int64_t> DeltaBases(const std::vector<EngineDeltaMode>& modes);

class DeltaPolicy {
 public:
  // Engine ranks 0..engine_world_size-1, none of which holds a version.
  explicit DeltaPolicy(int32_t engine_world_size);

  // The announcement of the next round: per engine rank, dense or delta.
  // With `delta_enabled` false every rank is dense.
  std::vector<EngineDeltaMode> Announce(bool delta_enabled) const;

  // Engine rank `rank` (re)registered: it holds no committed version.
  // INVALID_ARGUMENT naming the rank when it is out of range.
  absl::Status OnEngineJoined(int32_t rank);

  // The round of `version` committed on every engine rank and trainer.
  void OnCommit(int64_t version);

  // The round aborted: every engine rank may hold part of it.
  void OnAbort();

  // The version whose bytes the trainers' snapshots hold (-1: none).
  int64_t snapshot_version() const { return snapshot_version_; }
  int64_t committed_version(int32_t rank) const { return committed_[rank]; }
  bool torn(int32_t rank) const { return torn_[rank]; }

 private:
  int64_t snapshot_version_ = -1;
  std::vector<int64_t> committed_;
  std::vector<bool> torn_;
};

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DELTA_POLICY_H_
