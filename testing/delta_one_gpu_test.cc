// Delta and verified rounds of GPU members on ONE GPU: trainer and engine
// are threads of this process, both on GPU 0 (one CUDA context; cudaFree
// deferred to the end of each case: deferred_cuda_free.h), over the
// in-process device transport (cuda_inproc_transport.h) instead of NCCL,
// built as a member builds them (testing/delta_gpu_members.h:
// MakeDeltaMemberRunner; cuda_inproc_parts.h: the CUDA copier, the GPU wave ops) for BF16, FP8, MXFP8 and NVFP4 engines: a dense
// first round, a delta round of 1% changed words, every engine byte equal
// to the host reference after each and the digests agreeing; a byte
// flipped in the engine's GPU memory fails the next verified round naming
// engine rank 0 and the tensor. SKIP (REFIT_GPU_SKIP) without a GPU.
#include <memory>
#include <string>
#include <vector>

#include "exec/member_runner.h"
#include "gtest/gtest.h"
#include "testing/cuda_inproc_parts.h"
#include "testing/deferred_cuda_free.h"
#include "testing/delta_gpu_members.h"
#include "testing/gpu_test.h"

namespace refit {
namespace testing {
namespace {

// Trainer and engine on GPU 0, one fabric per plan.
GpuMembers OneGpuMembers() {
  GpuMembers m;
  m.use = [](int32_t) { cudaSetDevice(0); };
  m.parts = [](int32_t lanes) {
    auto fabric = CudaInProcFabric::Create(2, lanes);
    EXPECT_TRUE(fabric.ok()) << fabric.status();
    return std::vector<DataPlaneParts>{CudaInProcParts(*fabric), CudaInProcParts(*fabric)};
  };
  // A round that waits on itself ends by then (never a hang).
  m.round_timeout = absl::Seconds(20);
  return m;
}

// One case's rounds with every cudaFree deferred to its end.
void Rounds(const std::string& model, const std::string& spec, int32_t lanes = 2,
            int64_t budget = 1 << 20) {
  DeferCudaFrees defer;
  RunGpuDeltaRounds(OneGpuMembers(), model, spec, lanes, budget);
}

TEST(DeltaOneGpuTest, GpuMembersOnOneGpuRunDeltaRoundsAndVerifiedRoundsCatchAFlippedByte) {
  REFIT_SKIP_WITHOUT_GPU("delta_one_gpu_test");
  // Stops at the first case that fails (each failing round waits out its
  // 20 s deadline).
  const struct {
    const char* model;
    const char* spec;
    int32_t lanes;
    int64_t budget;
  } cases[] = {
      {"tiny-qwen3-moe-b128", "vllm:tp=1", 2, 1 << 20},
      {"tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 2, 4 << 20},
      {"tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8", 2, 1 << 20},
      {"tiny-qwen3-moe-fp4", "vllm:tp=1,quant=nvfp4", 2, 1 << 20},
      {"tiny-qwen3-moe-b128", "vllm:tp=1", 4, 1 << 20},
      // FP8 batches quantizing on every lane's stream.
      {"tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 4, 4 << 20},
  };
  for (const auto& c : cases) {
    Rounds(c.model, c.spec, c.lanes, c.budget);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace testing
}  // namespace refit
