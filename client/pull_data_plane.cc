// PullDataPlaneOptions (see pull_data_plane.h).
#include "client/pull_data_plane.h"

#include <memory>
#include <utility>

#include "client/nccl_data_plane.h"
#include "common/status_macros.h"
#include "exec/pull/cuda/pull_runner.h"

namespace refit {

DataPlaneOptions PullDataPlaneOptions(int device, void* ready_stream, bool staged) {
  // Pairs across hosts go over NCCL.
  DataPlaneOptions o = NcclDataPlaneOptions(device);
  o.transport_kind = TransportKind::kPull;
  o.staging.enabled = staged;
  o.pull = [device, ready_stream, staged](const Plan& slice, Side side, int32_t rank,
                                    std::vector<char*> buffers, KvStore* store,
                                    std::function<bool(int32_t)> pull_peer,
                                    absl::Time deadline)
      -> absl::StatusOr<std::unique_ptr<RoundRunner>> {
    PullRunnerOptions po;
    po.device = device;
    po.ready_stream = ready_stream;
    po.key_prefix = "pull";
    po.pull_peer = std::move(pull_peer);
    // A staged engine keeps serving while the round arrives: the copy
    // leaves it most SMs.
    if (staged && side == Side::kEngine) po.receive_blocks = kStagedReceiveBlocks;
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<PullRunner> e,
                           PullRunner::Create(slice, side, rank, std::move(buffers), store,
                                              std::move(po), deadline));
    return std::unique_ptr<RoundRunner>(std::move(e));
  };
  return o;
}

}  // namespace refit
