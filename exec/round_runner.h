// RoundRunner: a member's whole data plane for one plan, the one interface
// a member holds (exec/member_runner.h makes it): an executor over a
// transport (exec/composite_runner.h: ExecutorRunner), the colocated pull
// path (exec/pull/cuda/pull_runner.h), or runners composed into one
// (CompositeRunner). A runner may wrap another: it runs the inner runner
// inside its own Run and forwards Cancel.
#ifndef REFIT_EXEC_ROUND_RUNNER_H_
#define REFIT_EXEC_ROUND_RUNNER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exec/run_stats.h"

namespace refit {

class RoundRunner {
 public:
  virtual ~RoundRunner() = default;
  // Runs the member's part of one round. Fails with DEADLINE_EXCEEDED,
  // UNAVAILABLE naming a peer that died, or the reason given to Cancel;
  // must not be run again after a failure.
  virtual absl::StatusOr<RunStats> Run(absl::Time deadline) = 0;
  // Makes the wait in progress and later Runs fail promptly with `reason`.
  // Thread-safe.
  virtual void Cancel(const absl::Status& reason) = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_ROUND_RUNNER_H_
