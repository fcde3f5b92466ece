// RoundRunner: a member's whole data plane for one plan, the one interface
// a member holds (exec/member_runner.h makes it): an executor over a
// transport (exec/composite_runner.h: ExecutorRunner), the delta runner
// (exec/delta/delta_runner.h), the colocated pull path
// (exec/pull/cuda/pull_runner.h), or runners composed into one
// (CompositeRunner).
//
// Every round has one lifecycle, whatever the runner:
//   Begin(RoundStart)   the announcement: version, per engine rank dense
//                       or delta against a base version, whether to digest
//   Run(deadline)       the round's waves; RunStats carries the figures
//                       and digest parts
//   Finish(outcome)     refitd's decision: committed or aborted
// A runner that moves dense bytes only (executor, pull runner) runs every
// round dense and reports no digests. A runner may wrap another: it
// forwards Begin, Finish and Cancel and runs the inner runner inside its
// own Run.
#ifndef REFIT_EXEC_ROUND_RUNNER_H_
#define REFIT_EXEC_ROUND_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exec/run_stats.h"

namespace refit {

// A round as refitd announced it.
struct RoundStart {
  int64_t version = 0;
  // Per engine rank (indexed by engine rank): the version its buffers
  // hold, against which the round may send the change; -1, or a rank past
  // the end: dense.
  std::vector<int64_t> delta_base;
  // Digest both sides of the round (RunStats::digests) for refitd to
  // compare.
  bool digest = false;
};

// What refitd decided for a round every member ran.
enum class RoundOutcome { kCommitted, kAborted };

class RoundRunner {
 public:
  virtual ~RoundRunner() = default;
  // Announces the next round; call before each Run.
  virtual void Begin(const RoundStart& round) = 0;
  // Runs the member's part of the round begun last. Fails with
  // DEADLINE_EXCEEDED, UNAVAILABLE naming a peer that died, or the reason
  // given to Cancel; must not be run again after a failure (Finish the
  // round as aborted, then drop the runner).
  virtual absl::StatusOr<RunStats> Run(absl::Time deadline) = 0;
  // refitd's outcome of the round begun last (whether or not Run
  // succeeded here): a delta runner's snapshot takes what it sent on
  // kCommitted and keeps the previous version on kAborted.
  virtual void Finish(RoundOutcome outcome) = 0;
  // Makes the wait in progress and later Runs fail promptly with `reason`.
  // Thread-safe.
  virtual void Cancel(const absl::Status& reason) = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_ROUND_RUNNER_H_
