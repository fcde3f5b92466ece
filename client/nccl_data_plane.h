// The NCCL flavour of the client's data plane (CUDA builds only): the
// transport factory and device copier a DataPlaneMember needs when its
// buffers live in GPU memory.
//
//   DataPlaneOptions o = NcclDataPlaneOptions(/*device=*/local_rank);
//   auto m = DataPlaneMember::Create(client, device_buffers, o);
#ifndef REFIT_CLIENT_NCCL_DATA_PLANE_H_
#define REFIT_CLIENT_NCCL_DATA_PLANE_H_

#include "client/data_plane.h"

namespace refit {

// NCCL transport on CUDA device `device` (one communicator and stream per
// lane, unique ids through refitd's key-value store) with the CUDA
// pack/unpack kernels on the lanes' streams, and delta rounds' codec on
// the GPU, a trainer's snapshot in `snapshot` (GPU memory by default).
// Its device_uuid is CudaDeviceUuid(device); staged rounds, when enabled,
// stage in device memory (CudaStagingMemory).
DataPlaneOptions NcclDataPlaneOptions(int device,
                                      SnapshotMemory snapshot = SnapshotMemory::kDevice);

// The physical identity of CUDA device `device` as nvidia-smi prints it
// ("GPU-8f3c0b1e-..."), the same whatever CUDA_VISIBLE_DEVICES renumbers;
// empty when the device cannot be queried.
std::string CudaDeviceUuid(int device);

}  // namespace refit

#endif  // REFIT_CLIENT_NCCL_DATA_PLANE_H_
