// A delta round harness for tests: every rank of a plan a thread over
// Gloo (TCP on 127.0.0.1) or an in-process transport, a DeltaPolicy as
// refitd's stand-in, digests compared and the round committed or aborted
// as refitd does, every engine byte checkable against a reference copy.
#ifndef REFIT_TESTING_DELTA_ROUNDS_H_
#define REFIT_TESTING_DELTA_ROUNDS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "exec/delta/delta_policy.h"
#include "exec/delta/delta_runner.h"
#include "plan/plan.h"
#include "testing/reference_copy.h"

namespace refit {
namespace testing {

// One job: the trainers' and engines' buffers of every rank, the trainers'
// snapshots and refitd's policy.
struct Job {
  Plan plan;
  OwnedBuffers trainer, engine;
  std::vector<DeltaSnapshot> snapshots;
  std::unique_ptr<DeltaPolicy> policy;
  bool gloo = true;
  int32_t lanes = 2;  // the plan's and the transports'
  bool sliced = false;  // every rank runs its own slice (as refitd hands out)
  int64_t version = 0;
  std::mt19937_64 rng{7};
};

// Returns a job of `plan` (over Gloo when `gloo`, else in-process):
// random trainer bytes, engine bytes 0xEE, one snapshot per trainer rank.
std::unique_ptr<Job> JobOf(Plan plan, bool gloo);

// Gives `plan` a staging budget whose delta batches (half a lane's room)
// take about `window` bytes of a lane, and whose rooms still hold the
// largest plan wave of any rank.
void SetBatchWindow(Plan* plan, int64_t window);

// Changes about `fraction` of the trainers' 2-byte words to new values.
void Change(Job* job, double fraction);

// What one round did, per rank and as a whole.
struct RoundResult {
  std::vector<absl::Status> status;  // per global rank
  std::vector<RunStats> run;
  std::vector<DeltaRoundStats> stats;
  // Per global rank: the most its runner took from its copier at once.
  std::vector<int64_t> allocated_peak;
  absl::Status commit;  // the commit decision: OK, or why it failed
};

// One round of version job->version + 1 as refitd runs it: announce, run
// every rank (ranks in `absent` connect but never run), compare digests,
// commit or abort. `modes` overrides the announcement when not empty;
// `abort_after` aborts the round after every rank ran it (a member died
// before it reported).
RoundResult RunRound(Job* job, std::set<int> absent = {},
                     std::vector<EngineDeltaMode> modes = {},
                     absl::Duration timeout = absl::Seconds(20), bool abort_after = false);

// "" when every engine byte equals the reference copy of the trainers'.
std::string CheckEngines(const Job& job);

// Changes about `fraction` of the trainers' words (Change) and runs a
// round (RunRound) into *r. Returns "" when it committed with every engine
// byte right, else what went wrong.
std::string ChangeAndCommit(Job* job, double fraction, RoundResult* r);

// Returns the bytes `plan`'s relay messages carry.
int64_t RelayedBytes(const Plan& plan);

// A relay that never forwards (it connected, then died): after a change
// of about 2% of the trainers' words, runs a round (deadline 2 s) with the
// engine rank sending `relay` absent, then one with it back. Returns ""
// when the first round did not commit, ended within 10 s and failed the
// rank `relay` feeds naming the relay's rank, and the second committed
// with every engine byte right; else what went wrong.
std::string DeadRelayFailsItsDownstream(Job* job, const Message& relay);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_DELTA_ROUNDS_H_
