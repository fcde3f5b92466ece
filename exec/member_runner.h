// MakeMemberRunner: the one factory of a member's data plane. Given the
// member's plan slice and how its data plane is made (a transport, the
// copies an executor uses, optionally the colocated pull path, and whether
// refitd runs delta or verified rounds), it returns the RoundRunner the
// member holds:
//   - no pull path: an executor over the member's transport
//     (ExecutorRunner), or for delta and verified rounds the delta runner
//     (exec/delta/delta_runner.h) over it, on host memory or, with a codec
//     factory for device memory (DataPlaneParts::delta_ops), on the GPU;
//   - the pull path only (every pair on the member's host, or no hosts
//     known): the pull runner;
//   - both: the pull runner for the pairs on the member's host and an
//     executor over a transport among the network members for the pairs
//     across hosts, composed into one round (CompositeRunner).
// Colocated pull rounds stay dense (refitd refuses --delta for pull
// members when it plans: server/delta_transports.h), so a member whose
// pairs refitd pulls runs dense rounds with no digests.
#ifndef REFIT_EXEC_MEMBER_RUNNER_H_
#define REFIT_EXEC_MEMBER_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exec/convert/copier.h"
#include "exec/delta/delta_runner.h"
#include "exec/delta/wave_ops.h"
#include "exec/transport/kv_store.h"
#include "exec/program/plan_side.h"
#include "exec/round_runner.h"
#include "exec/transport/transport.h"
#include "plan/plan.h"

namespace refit {

// Creates the transport of one plan: `store` is the plan's key namespace on
// refitd, `rank`/`world` the member's global data-plane rank and the world
// (trainer ranks first, then engines), `lanes` the plan's lane count.
using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(
        KvStore* store, int32_t rank, int32_t world, int32_t lanes)>;

// The copies and staging of an executor over `transport` (e.g. a device
// Copier on the transport's streams).
using CopierFactory = std::function<std::unique_ptr<Copier>(Transport* transport)>;

// Creates the colocated pull path of a member for one plan: the member's
// slice, its side and side-local rank, its buffers (indexed like the
// slice's side's buffers), the plan's key namespace on refitd, and which
// members (global ranks) it pulls with — refitd's per-pair choice: those
// on its host; an empty function = every member; done by `deadline`.
using PullRunnerFactory = std::function<absl::StatusOr<std::unique_ptr<RoundRunner>>(
    const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
    KvStore* store, std::function<bool(int32_t)> pull_peer, absl::Time deadline)>;

// The codec steps of delta rounds on `transport`'s memory (e.g. the GPU
// wave ops on its lane streams).
using DeltaOpsFactory =
    std::function<absl::StatusOr<std::unique_ptr<DeltaWaveOps>>(Transport* transport)>;

// How a member's data plane is made.
struct DataPlaneParts {
  TransportFactory transport;  // required unless every pair is pulled
  CopierFactory copier;  // empty = host memcpy
  PullRunnerFactory pull;  // empty = no pull path
  bool segment_checksums = false;  // compared by both sides (ExecutorOptions)
  DeltaOpsFactory delta_ops;  // empty = host memory (MakeHostWaveOps)
  // Delta and verified rounds (refitd --delta / --verify_every): without a
  // pull path, the delta runner with these options (its copier and codec
  // are made here; the snapshot, a trainer's, must outlive the runner).
  bool delta = false;
  DeltaRunnerOptions delta_options;
};

// One member's part of a plan.
struct MemberSlice {
  const Plan* plan = nullptr;  // the member's slice
  Side side = Side::kTrainer;
  int32_t rank = 0;            // side-local
  std::vector<char*> buffers;  // indexed like the side's buffers
  int32_t global_rank = 0;
  int32_t global_world = 0;
  int32_t num_lanes = 1;
  // refitd's per-pair choice: hosts by global rank (empty: no hosts known,
  // the pull path takes every pair) and the network transport's members
  // (ascending global ranks).
  std::vector<int32_t> host_of_member;
  std::vector<int32_t> network_members;
};

// Returns the member's runner, bootstrapping through `store` (which must
// outlive the runner) by `deadline`. Fails with INVALID_ARGUMENT for a
// missing plan or factory, FAILED_PRECONDITION when delta rounds on device
// memory (a copier) have no codec factory, or the error of the transport,
// executor, delta runner or pull runner it creates (annotated with which).
absl::StatusOr<std::unique_ptr<RoundRunner>> MakeMemberRunner(const MemberSlice& member,
                                                              const DataPlaneParts& parts,
                                                              KvStore* store,
                                                              absl::Time deadline);

// MakeMemberRunner's runner for delta and verified rounds without a pull
// path (parts.delta), typed for checks and benches that read its
// delta_stats(): the delta runner over a transport from parts.transport
// (bootstrapped through `store`), with parts.copier's copier and
// parts.delta_ops's codec, all owned by the runner, and
// parts.delta_options. Fails as MakeMemberRunner.
absl::StatusOr<std::unique_ptr<DeltaRunner>> MakeDeltaMemberRunner(const MemberSlice& member,
                                                                   const DataPlaneParts& parts,
                                                                   KvStore* store);

}  // namespace refit

#endif  // REFIT_EXEC_MEMBER_RUNNER_H_
