// The GPU DeltaWaveOps (exec/delta/wave_ops.h): a wave's messages counted,
// encoded, applied and digested by a few kernels each, over all of them at
// once (delta_kernels.h: the Wave* launchers).
//
// Encoding runs on a codec stream (one, shared by every lane): Count reads the
// current and snapshot bytes of every message of the wave in one pass
// (mask and per-tile counts, one scan, the per-message totals: one copy to
// the host and the one wait of the wave), Encode gathers every payload in
// one launch and uploads the wave's headers in one copy, then makes the
// lane's transport stream wait for it. So the encode of wave k+1 runs
// while the lane of wave k sends. Apply runs on the lane's transport
// stream, after the payloads' receive: the checks of every message, then
// the scatter, which writes nothing when any check failed; Finish reads
// the checks. Nothing waits per message.
#ifndef REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_H_
#define REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "exec/transport/cuda/cuda_lanes.h"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/wave_ops.h"

namespace refit {

struct GpuWaveOpsOptions {
  int device = 0;  // the CUDA device of the lanes
  // Where a trainer's snapshot lives: device memory (read at HBM speed), or
  // pinned host memory (the GPU reads it over the bus: slower, no HBM).
  SnapshotMemory snapshot = SnapshotMemory::kDevice;
};

// Ops on `lanes`' streams (`lanes` must outlive them). Fails with the CUDA
// error (UNAVAILABLE: no device) when the codec streams cannot be made.
absl::StatusOr<std::unique_ptr<DeltaWaveOps>> MakeGpuWaveOps(CudaLanes* lanes,
                                                             GpuWaveOpsOptions options = {});

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_H_
