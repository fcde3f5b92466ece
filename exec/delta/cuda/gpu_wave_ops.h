// The GPU DeltaWaveOps (exec/delta/wave_ops.h): a wave's messages counted,
// encoded, applied and digested by a few kernels each, over all of them at
// once (delta_kernels.h: the Wave* launchers).
//
// Encoding runs on a codec stream (one for every lane by default): Count reads the
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
  // The mask pass's kernel (delta_kernels.h: WaveMaskConfig); a
  // persistent kind with no grid given gets the device's resident blocks.
  WaveMaskConfig mask;
  // Verified rounds: the count digests the current bytes of the messages it
  // compares in the same read (true), or a digest kernel reads them again
  // on a stream of its own beside the counts (false).
  bool fused_digest = true;
  // Where the tiles' offsets are scanned: on the count's stream right after
  // the mask pass (true), or on the gather's stream before the gather.
  bool scan_with_count = false;
  // Streams the counts of a lane alternate over: 1, or 2 (a count starts
  // as the last one's warps end, beside it).
  int count_streams = 1;
  // Every lane's counts on one stream (true), in the order they start, or
  // each lane's on its own. Counts read at the HBM rate: two at once take
  // twice as long each, delay both waves' sends and hold the SMs the
  // gathers need.
  bool shared_counts = true;
};

// Ops on `lanes`' streams (`lanes` must outlive them). Fails with the CUDA
// error (UNAVAILABLE: no device) when the codec streams cannot be made.
absl::StatusOr<std::unique_ptr<DeltaWaveOps>> MakeGpuWaveOps(CudaLanes* lanes,
                                                             GpuWaveOpsOptions options = {});

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_H_
