// Members' data planes on one GPU: see cuda_inproc_parts.h.
#include "testing/cuda_inproc_parts.h"

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "exec/cuda/cuda_copier.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "gtest/gtest.h"

namespace refit {
namespace testing {

DataPlaneParts CudaInProcParts(std::shared_ptr<CudaInProcFabric> fabric) {
  DataPlaneParts p;
  p.transport = [fabric](KvStore*, int32_t rank, int32_t,
                         int32_t) -> absl::StatusOr<std::unique_ptr<Transport>> {
    auto t = CudaInProcTransport::Create(fabric, rank);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.copier = [](Transport* t) { return MakeCudaCopier(static_cast<CudaInProcTransport*>(t)); };
  p.delta_ops = [](Transport* t) {
    return MakeGpuWaveOps(static_cast<CudaInProcTransport*>(t), GpuWaveOpsOptions{});
  };
  return p;
}

MemberKit OneGpuKit() {
  MemberKit k;
  k.parts = [](int32_t world, int32_t lanes) {
    absl::StatusOr<std::shared_ptr<CudaInProcFabric>> fabric =
        CudaInProcFabric::Create(world, lanes);
    EXPECT_TRUE(fabric.ok()) << fabric.status();
    return std::vector<DataPlaneParts>(world, CudaInProcParts(*fabric));
  };
  k.use = [](int32_t) { cudaSetDevice(0); };
  k.alloc = [](int64_t n) {
    char* p = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n), cudaSuccess);
    return p;
  };
  k.write = [](char* to, const uint8_t* from, int64_t n) {
    EXPECT_EQ(cudaMemcpy(to, from, n, cudaMemcpyHostToDevice), cudaSuccess);
  };
  k.read = [](uint8_t* to, const char* from, int64_t n) {
    EXPECT_EQ(cudaMemcpy(to, from, n, cudaMemcpyDeviceToHost), cudaSuccess);
  };
  k.free = [](char* p) { cudaFree(p); };
  return k;
}

}  // namespace testing
}  // namespace refit
