// MemberRounds: every rank of a plan a thread of this process, each
// running the runner a member runs (exec/member_runner.h: an executor for
// dense rounds, the delta runner for delta and verified rounds), over the
// data planes and in the memory a MemberKit makes (host memory and the
// in-process transport, or device memory and a device transport), rounds
// announced, committed and aborted as refitd does (DeltaPolicy, digests
// compared), every engine byte checkable against the host reference copy.
// A round that fails leaves the runners dead; the next round runs on new
// runners over a new data plane (as refitd rebuilds a member's data plane
// after an aborted round), on the same buffers.
#ifndef REFIT_TESTING_MEMBER_ROUNDS_H_
#define REFIT_TESTING_MEMBER_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exec/delta/delta_policy.h"
#include "exec/delta/delta_runner.h"
#include "exec/member_runner.h"
#include "plan/plan.h"
#include "testing/reference_copy.h"

namespace refit {
namespace testing {

// How a check's members are made: their data planes and their memory.
struct MemberKit {
  // The parts of each global rank's data plane (trainer ranks first) for a
  // world of `world` ranks over `lanes` lanes: one new data plane per
  // call. parts.delta and the trainers' snapshots are set by MemberRounds.
  std::function<std::vector<DataPlaneParts>(int32_t world, int32_t lanes)> parts;
  // Makes global rank `rank`'s device current in the calling thread before
  // it allocates, runs or reads that member's memory (empty: nothing).
  std::function<void(int32_t rank)> use;
  // A member's memory: `bytes` bytes, copies in and out, freed.
  std::function<char*(int64_t bytes)> alloc;
  std::function<void(char* to, const uint8_t* from, int64_t bytes)> write;
  std::function<void(uint8_t* to, const char* from, int64_t bytes)> read;
  std::function<void(char* p)> free;
};

// What one round did.
struct MemberRound {
  std::vector<absl::Status> status;  // per global rank
  std::vector<RunStats> run;         // per global rank (when it ran OK)
  std::vector<DeltaRoundStats> delta;  // per global rank (delta runners)
  absl::Status commit;  // OK, or why the round did not commit
  absl::Duration took;  // from the round's start until every rank returned
};

// How a rank stops in a round (MemberRounds::Run).
enum class RankStop {
  kStalled,    // its runner never runs the round (connected, then silent)
  kCancelled,  // its runner is cancelled as the round starts, then runs
};

class MemberRounds {
 public:
  // Buffers of every rank of `plan` (trainer bytes from the reference
  // pattern, engine bytes 0xEE) in the kit's memory, and every rank's
  // runner: the delta runner when `delta` (MakeDeltaMemberRunner), else
  // the dense runner (MakeMemberRunner: an executor). Fails with the first
  // rank's runner error, naming its global rank.
  static absl::StatusOr<std::unique_ptr<MemberRounds>> Create(Plan plan, MemberKit kit,
                                                              bool delta);
  // Drops every runner and frees every buffer, each in its rank's thread.
  ~MemberRounds();
  MemberRounds(const MemberRounds&) = delete;
  MemberRounds& operator=(const MemberRounds&) = delete;

  // Runs the round of the next version on every rank with a deadline
  // `timeout` from its start; delta runners get the policy's announcement
  // and digest (a verified round). Global rank `stopped` (-1: none) stops
  // as `how` says. The round commits when every rank ran it and (delta)
  // the digests agree (CompareDigests); else it aborts (the policy marks
  // every engine rank torn) and the runners are rebuilt for the next.
  MemberRound Run(absl::Duration timeout, int32_t stopped = -1,
                  RankStop how = RankStop::kStalled);

  // Changes about `fraction` of the trainers' 2-byte words (their low
  // byte: a BF16 weight's low mantissa bits, so values stay finite) and
  // writes the trainers' buffers.
  void Change(double fraction);

  // Returns "" when every byte of every engine buffer equals the reference
  // copy of the trainers' current bytes, else the first buffer and byte
  // that differs.
  std::string CheckEngines();

  // XORs `bits` into byte `offset` of engine buffer `buffer` (plan.dst).
  void FlipEngineByte(int32_t buffer, int64_t offset, uint8_t bits);

  const Plan& plan() const { return plan_; }

 private:
  MemberRounds(Plan plan, MemberKit kit, bool delta);
  // Makes every rank's runner on a new data plane.
  absl::Status Connect();
  // Runs fn(global rank) on a thread per rank (the rank's device current).
  void OnEveryRank(const std::function<void(int32_t)>& fn);
  // Engine buffer b's global rank.
  int32_t EngineGlobal(size_t b) const;

  Plan plan_;
  MemberKit kit_;
  bool delta_;
  int32_t ws_ = 0;
  int32_t world_ = 0;
  OwnedBuffers trainer_;  // the trainers' bytes on the host (plan.src buffers)
  std::vector<char*> trainer_mem_, engine_mem_;  // in the kit's memory
  std::vector<DeltaSnapshot> snapshots_;  // per trainer rank
  DeltaPolicy policy_;
  int64_t version_ = 0;
  std::vector<std::unique_ptr<RoundRunner>> runners_;
  std::vector<DeltaRunner*> delta_runners_;  // the same runners, typed (delta)
  std::mt19937_64 rng_{5};
};

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_MEMBER_ROUNDS_H_
