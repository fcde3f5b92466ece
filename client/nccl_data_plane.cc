// NcclDataPlaneOptions (see nccl_data_plane.h).
#include "client/nccl_data_plane.h"

#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "reshard/nccl_transport.h"

namespace refit {

DataPlaneOptions NcclDataPlaneOptions(int device) {
  DataPlaneOptions o;
  o.transport = [device](KvStore* store, int32_t rank, int32_t world,
                         int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    NcclTransportOptions no;
    no.num_lanes = lanes;
    no.device = device;
    no.key_prefix = "nccl";
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<NcclTransport> t,
                           NcclTransport::Create(store, rank, world, no));
    return std::unique_ptr<Transport>(std::move(t));
  };
  // The factory above only makes NcclTransports.
  o.copy_engine = [](Transport* t) {
    return MakeCudaCopyEngine(static_cast<NcclTransport*>(t));
  };
  return o;
}

}  // namespace refit
