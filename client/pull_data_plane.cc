// PullDataPlaneOptions (see pull_data_plane.h).
#include "client/pull_data_plane.h"

#include <memory>
#include <utility>

#include "client/nccl_data_plane.h"
#include "common/status_macros.h"
#include "exec/cuda/pull_engine.h"
#include "exec/pull_program.h"

namespace refit {

DataPlaneOptions PullDataPlaneOptions(int device, void* ready_stream) {
  DataPlaneOptions o;
  o.device_uuid = CudaDeviceUuid(device);
  o.transport_kind = TransportKind::kIpc;
  o.runner = [device, ready_stream](const Plan& slice, Side side, int32_t rank,
                                    std::vector<char*> buffers, KvStore* store,
                                    absl::Time deadline)
      -> absl::StatusOr<std::unique_ptr<RoundRunner>> {
    PullEngineOptions po;
    po.device = device;
    po.ready_stream = ready_stream;
    po.key_prefix = "pull";
    const int32_t me = GlobalRank(slice, side, rank);
    Plan hosts;  // only what SameHost reads
    hosts.src.world_size = slice.src.world_size;
    hosts.src.host_of_rank = slice.src.host_of_rank;
    hosts.dst.world_size = slice.dst.world_size;
    hosts.dst.host_of_rank = slice.dst.host_of_rank;
    po.pull_peer = [hosts = std::move(hosts), me](int32_t g) { return SameHost(hosts, me, g); };
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<PullEngine> e,
                           PullEngine::Create(slice, side, rank, std::move(buffers), store,
                                              std::move(po), deadline));
    return std::unique_ptr<RoundRunner>(std::move(e));
  };
  return o;
}

}  // namespace refit
