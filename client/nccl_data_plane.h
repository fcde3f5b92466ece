// The NCCL flavour of the client's data plane (CUDA builds only): the
// transport factory and device copy engine a DataPlaneMember needs when its
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
// pack/unpack kernels on the lanes' streams.
DataPlaneOptions NcclDataPlaneOptions(int device);

}  // namespace refit

#endif  // REFIT_CLIENT_NCCL_DATA_PLANE_H_
