// HostPullRunner: a stand-in for the colocated pull runner
// (exec/pull/cuda/pull_runner.h) in tests without a GPU. Members are threads of
// one process: a receiver runs its pull program (exec/pull/pull_program.h) with
// memcpy straight out of its senders' host buffers, found through their
// slices exactly as the engine maps them (PairSourceBuffers). It does not
// order the two sides: the sources must hold the round's values before any
// receiver runs.
#ifndef REFIT_TESTING_HOST_PULL_RUNNER_H_
#define REFIT_TESTING_HOST_PULL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "exec/program/copy_program.h"
#include "exec/round_runner.h"
#include "plan/plan.h"

namespace refit::testing {

// A sender as receivers see it: its slice and its buffers (indexed like the
// slice's source buffers).
struct HostPullSource {
  Plan slice;
  std::vector<char*> buffers;
};

class HostPullRunner : public RoundRunner {
 public:
  // Engine rank `rank` of its `slice`, writing into `buffers` (indexed like
  // the slice's destination buffers), pulling from the trainer ranks t for
  // which `pull_peer(t)` (global rank) holds; `sources` (by trainer rank)
  // must hold each of them. INVALID_ARGUMENT naming the rank or buffer when
  // a source is missing or a buffer is null.
  static absl::StatusOr<std::unique_ptr<HostPullRunner>> CreateReceiver(
      const Plan& slice, int32_t rank, const std::vector<char*>& buffers,
      const std::map<int32_t, HostPullSource>& sources,
      const std::function<bool(int32_t)>& pull_peer);
  // Trainer rank `rank`: its Run reports the bytes its pulled receivers
  // read (engine global ranks g with pull_peer(g)) and moves nothing.
  static absl::StatusOr<std::unique_ptr<HostPullRunner>> CreateSender(
      const Plan& slice, int32_t rank, const std::function<bool(int32_t)>& pull_peer);

  // Pull rounds move dense bytes: every round runs dense, with no digests,
  // and its outcome changes nothing.
  void Begin(const RoundStart& round) override {}
  void Finish(RoundOutcome outcome) override {}
  // Runs the copies (a receiver). Fails with the reason given to Cancel.
  absl::StatusOr<RunStats> Run(absl::Time deadline) override;
  void Cancel(const absl::Status& reason) override;

 private:
  HostPullRunner() = default;
  bool sender_ = false;
  int64_t bytes_ = 0;
  std::vector<ResolvedCopy> copies_;
  absl::Mutex mu_;
  absl::Status cancelled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::testing

#endif  // REFIT_TESTING_HOST_PULL_RUNNER_H_
