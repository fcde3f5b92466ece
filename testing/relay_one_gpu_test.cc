// Relays on ONE GPU: every rank of a plan with relays (engine replicas
// forwarding from their own device buffers what an earlier wave wrote) a
// thread of this process on GPU 0, each running the runner a member runs
// (the executor for dense rounds, the delta runner for delta and verified
// rounds) with the CUDA copier and the GPU wave ops, over the in-process
// device transport (cuda_inproc_transport.h) in NCCL's place
// (cuda_inproc_parts.h); every cudaFree deferred to the end of a case
// (deferred_cuda_free.h). The cases and checks are the host check's
// (relay_checks.h, relay_rounds_test): every byte of every engine replica
// equal to the host reference after every round, staging within the
// budget, BF16 and FP8 (codes and scales relayed as bytes) replicas; a
// byte flipped in a relay's buffer fails the next verified round naming
// its engine rank and the tensor; a stalled and a cancelled relay fail
// the rank they feed within the deadline naming the relay, and the round
// after commits. SKIP (REFIT_GPU_SKIP) without a GPU.
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "testing/cuda_inproc_parts.h"
#include "testing/deferred_cuda_free.h"
#include "testing/gpu_test.h"
#include "testing/relay_checks.h"

namespace refit {
namespace testing {
namespace {

TEST(RelayOneGpuTest, DenseRoundsRelayEveryByteFromTheEnginesDeviceBuffers) {
  REFIT_SKIP_WITHOUT_GPU("relay_one_gpu_test");
  for (const RelayCase& c : DenseRelayCases()) {
    DeferCudaFrees defer;
    std::printf("%s\n", CheckDenseRelayRounds(OneGpuKit(), c).c_str());
    if (HasFailure()) return;
  }
}

TEST(RelayOneGpuTest, DeltaRoundsRelayCatchAFlippedRelayByteAndAStoppedRelay) {
  REFIT_SKIP_WITHOUT_GPU("relay_one_gpu_test");
  for (const RelayCase& c : DeltaRelayCases()) {
    DeferCudaFrees defer;
    std::printf("%s\n", CheckDeltaRelayRounds(OneGpuKit(), c).c_str());
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace testing
}  // namespace refit
