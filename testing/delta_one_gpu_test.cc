// Delta and verified rounds of GPU members on ONE GPU: trainer and engine
// are threads of this process, both on GPU 0 in CUDA contexts of their own
// (cuda_contexts.h), over the in-process device transport
// (cuda_inproc_transport.h) instead of NCCL, built as a member
// builds them (testing/delta_gpu_members.h: MakeDeltaMemberRunner, the CUDA
// copier, the GPU wave ops) for BF16, FP8, MXFP8 and NVFP4 engines: a dense
// first round, a delta round of 1% changed words, every engine byte equal
// to the host reference after each and the digests agreeing; a byte
// flipped in the engine's GPU memory fails the next verified round naming
// engine rank 0 and the tensor. SKIP (REFIT_GPU_SKIP) without a GPU.
#include <memory>
#include <vector>

#include "exec/cuda/cuda_copier.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "exec/member_runner.h"
#include "gtest/gtest.h"
#include "testing/cuda_contexts.h"
#include "testing/cuda_inproc_transport.h"
#include "testing/delta_gpu_members.h"
#include "testing/gpu_test.h"

namespace refit {
namespace testing {
namespace {

// The parts of one rank over `fabric` on GPU 0, in `context`.
DataPlaneParts InProcParts(std::shared_ptr<CudaInProcFabric> fabric, void* context) {
  DataPlaneParts p;
  p.transport = [fabric, context](KvStore*, int32_t rank, int32_t,
                                  int32_t) -> absl::StatusOr<std::unique_ptr<Transport>> {
    CudaInProcTransportOptions o;
    o.context = context;
    auto t = CudaInProcTransport::Create(fabric, rank, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.copier = [](Transport* t) { return MakeCudaCopier(static_cast<CudaInProcTransport*>(t)); };
  p.delta_ops = [](Transport* t) {
    return MakeGpuWaveOps(static_cast<CudaInProcTransport*>(t), GpuWaveOpsOptions{});
  };
  return p;
}

// Trainer and engine on GPU 0, each in a context of its own, one fabric
// per plan.
GpuMembers OneGpuMembers() {
  absl::StatusOr<std::unique_ptr<CudaContexts>> made = CudaContexts::Create(0, 2);
  EXPECT_TRUE(made.ok()) << made.status();
  std::shared_ptr<CudaContexts> contexts(made.ok() ? std::move(*made) : nullptr);
  GpuMembers m;
  m.use = [contexts](int32_t rank) {
    absl::Status s = contexts == nullptr ? absl::UnavailableError("no contexts")
                                         : contexts->Use(rank);
    EXPECT_TRUE(s.ok()) << s;
  };
  m.parts = [contexts](int32_t lanes) {
    auto fabric = CudaInProcFabric::Create(2, lanes);
    EXPECT_TRUE(fabric.ok()) << fabric.status();
    std::vector<DataPlaneParts> parts;
    for (int32_t r = 0; r < 2; ++r) {
      parts.push_back(InProcParts(*fabric, contexts ? contexts->context(r) : nullptr));
    }
    return parts;
  };
  return m;
}

TEST(DeltaOneGpuTest, GpuMembersOnOneGpuRunDeltaRoundsAndVerifiedRoundsCatchAFlippedByte) {
  REFIT_SKIP_WITHOUT_GPU("delta_one_gpu_test");
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1");
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 2, 4 << 20);
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8");
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-fp4", "vllm:tp=1,quant=nvfp4");
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1", 4);
  // FP8 batches quantizing on every lane's stream.
  RunGpuDeltaRounds(OneGpuMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 4, 4 << 20);
}

}  // namespace
}  // namespace testing
}  // namespace refit
