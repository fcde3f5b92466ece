// NcclDataPlaneOptions (see nccl_data_plane.h).
#include "client/nccl_data_plane.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "reshard/ipc_transport.h"
#include "reshard/nccl_transport.h"

namespace refit {

std::string CudaDeviceUuid(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";  // the transport reports the device's error when it starts
  }
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

DataPlaneOptions NcclDataPlaneOptions(int device) {
  DataPlaneOptions o;
  o.device_uuid = CudaDeviceUuid(device);
  o.transport_name = "nccl";
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

DataPlaneOptions IpcDataPlaneOptions(int device) {
  DataPlaneOptions o;
  o.device_uuid = CudaDeviceUuid(device);
  o.transport_name = "ipc";
  o.transport = [device](KvStore* store, int32_t rank, int32_t world,
                         int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    IpcTransportOptions io;
    io.num_lanes = lanes;
    io.device = device;
    io.key_prefix = "ipc";
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<IpcTransport> t,
                           IpcTransport::Create(store, rank, world, io));
    return std::unique_ptr<Transport>(std::move(t));
  };
  // The factory above only makes IpcTransports.
  o.copy_engine = [](Transport* t) {
    return MakeIpcCopyEngine(static_cast<IpcTransport*>(t));
  };
  return o;
}

}  // namespace refit
