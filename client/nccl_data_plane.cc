// NcclDataPlaneOptions (see nccl_data_plane.h).
#include "client/nccl_data_plane.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/cuda_staging_memory.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_copier.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "exec/delta/cuda/gpu_wave_ops.h"

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

namespace {

// A device data plane: transport T (NcclTransport: it has CUDA lane
// streams) made by T::Create with options O, the CUDA copier
// on its lanes.
template <typename T, typename O>
DataPlaneOptions DeviceDataPlane(int device, TransportKind kind) {
  DataPlaneOptions o;
  o.device_uuid = CudaDeviceUuid(device);
  o.transport_kind = kind;
  const std::string name(TransportKindName(kind));
  o.transport = [device, name](KvStore* store, int32_t rank, int32_t world,
                               int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    O to;
    to.num_lanes = lanes;
    to.device = device;
    to.key_prefix = name;
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<T> t, T::Create(store, rank, world, to));
    return std::unique_ptr<Transport>(std::move(t));
  };
  // The factory above only makes T.
  o.copier = [](Transport* t) { return MakeCudaCopier(static_cast<T*>(t)); };
  return o;
}

}  // namespace

DataPlaneOptions NcclDataPlaneOptions(int device, SnapshotMemory snapshot) {
  DataPlaneOptions o =
      DeviceDataPlane<NcclTransport, NcclTransportOptions>(device, TransportKind::kNccl);
  // Delta rounds: the GPU codec on the transport's lane streams.
  o.delta_ops = [device, snapshot](Transport* t) {
    GpuWaveOpsOptions go;
    go.device = device;
    go.snapshot = snapshot;
    return MakeGpuWaveOps(static_cast<NcclTransport*>(t), go);
  };
  // Staged rounds (when the caller enables them): device staging.
  o.staging.memory = [device] { return CudaStagingMemory(device); };
  return o;
}

}  // namespace refit
