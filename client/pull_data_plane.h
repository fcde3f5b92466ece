// The colocated flavour of the client's data plane (CUDA builds only):
// members of one host pull straight from each other's device memory
// (exec/pull/cuda/pull_runner.h), one kernel per round, whatever allocator made
// the buffers (cudaMalloc or cuMem / expandable segments).
//
//   DataPlaneOptions o = PullDataPlaneOptions(/*device=*/local_rank);
//   auto m = DataPlaneMember::Create(client, device_buffers, o);
#ifndef REFIT_CLIENT_PULL_DATA_PLANE_H_
#define REFIT_CLIENT_PULL_DATA_PLANE_H_

#include "client/data_plane.h"

namespace refit {

// The pull path on CUDA device `device`, registered as transport "pull".
// `ready_stream` (a cudaStream_t; null = the legacy default stream, where
// PyTorch's default stream writes) is where a trainer's weights are
// written: a round reads them once the work queued there is done.
// Every member pulls from the members of its host; pairs across hosts go
// over NCCL (NcclDataPlaneOptions) in the same round, as refitd decides per
// pair (the job's members sharing a GPU must not have such pairs).
// `staged`: staged rounds (DataPlaneOptions::staging enabled); an engine
// member's copy kernel then runs on a bounded grid (kStagedReceiveBlocks,
// exec/pull/cuda/pull_runner.h) so that the engine, serving while the
// round arrives, keeps most SMs.
DataPlaneOptions PullDataPlaneOptions(int device, void* ready_stream = nullptr,
                                      bool staged = false);

}  // namespace refit

#endif  // REFIT_CLIENT_PULL_DATA_PLANE_H_
