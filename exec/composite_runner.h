// Wave runners that compose data planes. A membership that spans hosts
// moves same-host pairs on the colocated pull path and the other pairs over
// a network transport, in one round: each member runs an ExecutorRunner
// (its executor over the network transport, with the pulled peers left
// out: ExecutorOptions::exclude_peer) next to its pull runner, both inside
// one CompositeRunner.
#ifndef REFIT_EXEC_COMPOSITE_RUNNER_H_
#define REFIT_EXEC_COMPOSITE_RUNNER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exec/convert/copier.h"
#include "exec/executor.h"
#include "exec/round_runner.h"
#include "exec/transport/transport.h"

namespace refit {

// An Executor over its Transport as a RoundRunner; owns both (and the
// copier the executor uses, if any).
class ExecutorRunner : public RoundRunner {
 public:
  // INVALID_ARGUMENT when `transport` or `executor` is null.
  static absl::StatusOr<std::unique_ptr<ExecutorRunner>> Create(
      std::unique_ptr<Transport> transport, std::unique_ptr<Copier> copier,
      std::unique_ptr<Executor> executor);
  ~ExecutorRunner() override;
  // The executor moves dense bytes only: every round runs dense, with no
  // digests, and its outcome changes nothing.
  void Begin(const RoundStart& round) override {}
  void Finish(RoundOutcome outcome) override {}
  // The executor's Run (see executor.h).
  absl::StatusOr<RunStats> Run(absl::Time deadline) override;
  // Cancels the transport: the executor's wait fails with `reason`.
  void Cancel(const absl::Status& reason) override;

 private:
  ExecutorRunner() = default;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Copier> copier_;
  std::unique_ptr<Executor> executor_;  // destroyed first
};

// Runs several round runners concurrently, one thread each (the first on
// the calling thread); a part that fails cancels the others with its
// error, so none waits for its deadline on peers that will not come.
class CompositeRunner : public RoundRunner {
 public:
  // INVALID_ARGUMENT when `parts` is empty or holds a null runner.
  static absl::StatusOr<std::unique_ptr<CompositeRunner>> Create(
      std::vector<std::unique_ptr<RoundRunner>> parts);
  // Begins the round on every part.
  void Begin(const RoundStart& round) override;
  // Runs every part once. Returns the sums of bytes, waves, messages, digest
  // parts and peak staging (the parts hold theirs at once) and the longest
  // part's seconds; fails with the error of the part that failed first (the
  // others were cancelled with it).
  absl::StatusOr<RunStats> Run(absl::Time deadline) override;
  // Finishes the round on every part.
  void Finish(RoundOutcome outcome) override;
  // Cancels every part.
  void Cancel(const absl::Status& reason) override;

 private:
  CompositeRunner() = default;
  std::vector<std::unique_ptr<RoundRunner>> parts_;
};

}  // namespace refit

#endif  // REFIT_EXEC_COMPOSITE_RUNNER_H_
