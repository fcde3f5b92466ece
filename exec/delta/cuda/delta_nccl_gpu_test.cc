// Delta and verified rounds of GPU members over NCCL (2 GPUs: trainer on
// GPU 0, engine on GPU 1), built as a member builds them
// (testing/delta_gpu_members.h: MakeDeltaMemberRunner with the NCCL
// transport, the CUDA copier and the GPU wave ops), for BF16, FP8, MXFP8
// and NVFP4 engines: a dense first round, then a delta round of 1% changed
// words, after each every engine byte equal to the host reference copy and
// the digests agreeing; then a byte flipped in the engine's GPU memory
// fails the next verified round's comparison, naming the engine rank and
// the tensor. SKIP (REFIT_GPU_SKIP) with fewer than 2 GPUs.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "exec/cuda/cuda_copier.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "exec/member_runner.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "gtest/gtest.h"
#include "testing/delta_gpu_members.h"

namespace refit {
namespace {

bool TwoGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n >= 2;
}

DataPlaneParts NcclParts(int device) {
  DataPlaneParts p;
  p.transport = [device](KvStore* store, int32_t rank, int32_t world,
                         int32_t lanes) -> absl::StatusOr<std::unique_ptr<Transport>> {
    NcclTransportOptions o;
    o.num_lanes = lanes;
    o.device = device;
    auto t = NcclTransport::Create(store, rank, world, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.copier = [](Transport* t) { return MakeCudaCopier(static_cast<NcclTransport*>(t)); };
  p.delta_ops = [device](Transport* t) {
    GpuWaveOpsOptions o;
    o.device = device;
    return MakeGpuWaveOps(static_cast<NcclTransport*>(t), o);
  };
  return p;
}

// Trainer on GPU 0, engine on GPU 1, over NCCL.
testing::GpuMembers NcclMembers() {
  testing::GpuMembers m;
  m.parts = [](int32_t) { return std::vector<DataPlaneParts>{NcclParts(0), NcclParts(1)}; };
  m.use = [](int32_t rank) { cudaSetDevice(rank); };
  return m;
}

TEST(DeltaNcclGpuTest, GpuMembersRunDeltaRoundsAndVerifiedRoundsCatchAFlippedByte) {
  if (!TwoGpus()) {
    std::printf("SKIP delta_nccl_gpu_test: needs 2 CUDA devices (REFIT_GPU_SKIP)\n");
    GTEST_SKIP() << "needs 2 CUDA devices";
  }
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1");
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 2,
                             4 << 20);
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8");
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-fp4", "vllm:tp=1,quant=nvfp4");
  // Four lanes (the planner's choice for plans of many staged pieces): each
  // lane connects before the round's kernels are in flight.
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1", 4);
  // FP8 batches quantizing on every lane's stream.
  testing::RunGpuDeltaRounds(NcclMembers(), "tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8", 4,
                             4 << 20);
}

}  // namespace
}  // namespace refit
