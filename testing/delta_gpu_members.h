// Delta and verified rounds of two GPU members (trainer global rank 0,
// engine global rank 1), built as a member builds them
// (MakeDeltaMemberRunner with a device transport, the CUDA copier and the
// GPU wave ops): a dense first round, a delta round of 1% changed words,
// after each every engine byte equal to the host reference copy and the
// digests agreeing; then a byte flipped in the engine's GPU memory fails
// the next verified round naming engine rank 0 and the tensor. Shared by
// the GPU checks over NCCL (two GPUs) and over the in-process device
// transport (one GPU). Reports failures through gtest.
#ifndef REFIT_TESTING_DELTA_GPU_MEMBERS_H_
#define REFIT_TESTING_DELTA_GPU_MEMBERS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exec/member_runner.h"

namespace refit {
namespace testing {

// How the two members' data planes are made for a plan of `lanes` lanes:
// the parts of global rank 0 (trainer) and 1 (engine) (parts.delta and the
// trainer's snapshot are set by the check), and how a thread makes a
// member's device (cudaSetDevice) or CUDA context current before it
// allocates, runs or reads that member's memory.
struct GpuMembers {
  std::function<std::vector<DataPlaneParts>(int32_t lanes)> parts;
  std::function<void(int32_t rank)> use;
  // Each round's deadline (from its start).
  absl::Duration round_timeout = absl::Seconds(60);
};

// Runs the check above for `model_name` (a registry model) into
// `engine_spec` (e.g. "vllm:tp=1,quant=fp8") over `lanes` lanes, planned
// with a staging budget of `budget` bytes (its lane rooms hold a batch's
// packed messages beside a message's quantized rows; the same plans run
// on the host in exec/delta:delta_quantize_test); prints one line of what
// the rounds did.
void RunGpuDeltaRounds(const GpuMembers& members, const std::string& model_name,
                       const std::string& engine_spec, int32_t lanes = 2,
                       int64_t budget = 1 << 20);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_DELTA_GPU_MEMBERS_H_
