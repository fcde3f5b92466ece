// GPU check of ConversionStage run in parts (the delta runner's way, on
// its lanes' streams): every conversion of a trainer rank quantized a tile
// row at a time on the GPU into device memory of the caller's (the source
// rows of fused weights gathered there too) writes the bytes Run writes
// into its whole-model scratch on the GPU, for FP8, MXFP8 and NVFP4
// engines; scales alone where the codes are not asked for. With no CUDA
// device it prints SKIP and REFIT_GPU_SKIP and passes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/convert/conversion_stage.h"
#include "exec/convert/cuda/cuda_convert_ops.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

ConversionStage::Memory DeviceMemory() {
  return {[](int64_t bytes) -> absl::StatusOr<char*> {
            char* p = nullptr;
            if (cudaMalloc(reinterpret_cast<void**>(&p), bytes + 1) != cudaSuccess) {
              return absl::ResourceExhaustedError("cudaMalloc");
            }
            return p;
          },
          [](char* p, int64_t) { cudaFree(p); }};
}

// One trainer rank (no tile cut between ranks: no amax exchange).
ConversionStage::AmaxExchange NoPeers() {
  return [](const std::map<int32_t, std::vector<float>>&)
             -> absl::StatusOr<std::map<int32_t, std::vector<float>>> {
    return absl::InternalError("no peers expected");
  };
}

TEST(ConversionRowsGpuTest, RowsOnTheGpuWriteTheBytesRunWrites) {
  REFIT_SKIP_WITHOUT_GPU("conversion_rows_gpu_test");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const auto& [model, engine] : std::vector<std::pair<std::string, std::string>>{
           {"tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8"},
           {"tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8"},
           {"tiny-qwen3-moe-fp4", "vllm:tp=1,quant=nvfp4"}}) {
    SCOPED_TRACE(engine);
    testing::PlannedCase pc;
    ASSERT_TRUE(testing::PlanCase(model, "megatron:tp=1", engine, &pc).ok());
    const Plan& plan = *pc.plan;
    OwnedBuffers host = AllocateBuffers(plan.src, 0);
    FillPattern(pc.src->layout, host.ptrs, {-1, 1});
    testing::DeviceCopies dev;
    std::vector<char*> registered(plan.src.buffers.size(), nullptr);
    for (size_t b = 0; b < plan.src.buffers.size(); ++b) {
      if (plan.src.buffers[b].scratch) continue;
      registered[b] = testing::ToDevice(host.storage[b]);
      dev.ptrs.push_back(registered[b]);
    }
    auto make_ops = [stream] { return MakeCudaConvertOps(stream); };
    std::vector<char*> whole = registered;
    auto a = ConversionStage::Create(plan, 0, make_ops, DeviceMemory(), &whole);
    ASSERT_TRUE(a.ok() && *a != nullptr) << a.status();
    ASSERT_TRUE((*a)->Run(whole, NoPeers()).ok());
    auto b = ConversionStage::CreateUnplaced(plan, 0, make_ops, registered);
    ASSERT_TRUE(b.ok() && *b != nullptr) << b.status();
    ConversionStage& stage = **b;
    // The amax pass gathers what does not lie dense in bands of rows into
    // memory of the caller's (as the delta runner's lane room).
    constexpr int64_t kBandBytes = 4 << 10;
    char* bands = testing::ToDevice(std::vector<char>(kBandBytes));
    ASSERT_TRUE(stage.ExchangeAmaxes(registered, NoPeers(), bands, kBandBytes).ok());
    cudaFree(bands);
    std::unique_ptr<ConvertOps> ops = MakeCudaConvertOps(stream);
    int64_t compared = 0, gathered = 0;
    for (bool codes : {true, false}) {
      std::vector<char*> parts = registered;
      testing::DeviceCopies mine;
      for (int32_t k = 0; k < stage.size(); ++k) {
        const Conversion& c = stage.conversion(k);
        for (int32_t buf : {c.to_buffer, c.scale_buffer, c.global_buffer}) {
          if (buf < 0 || parts[buf] != nullptr) continue;
          parts[buf] = testing::ToDevice(std::vector<char>(plan.src.buffers[buf].byte_size, 0x5A));
          mine.ptrs.push_back(parts[buf]);
        }
      }
      for (int32_t k = 0; k < stage.size(); ++k) {
        const Box& box = stage.conversion(k).from.box;
        const int64_t step = stage.row_align(k);
        if (box.rank() == 0) {
          ASSERT_TRUE(stage.Convert(*ops, parts, {{k, 0, 0, codes}}, nullptr).ok());
          continue;
        }
        for (int64_t r = box.origin(0); r < box.limit(0);) {
          const int64_t end = std::min(box.limit(0), (r / step + 1) * step);
          const ConversionStage::Rows rows{k, r, end, codes};
          const int64_t g = stage.gather_bytes(rows);
          gathered += g > 0;
          char* gather = testing::ToDevice(std::vector<char>(g));
          absl::Status s = stage.Convert(*ops, parts, {rows}, gather);
          ASSERT_TRUE(s.ok()) << s;
          ASSERT_TRUE(ops->Sync().ok());  // the gather area is freed next
          cudaFree(gather);
          r = end;
        }
      }
      for (int32_t k = 0; k < stage.size(); ++k) {
        const Conversion& c = stage.conversion(k);
        const bool want_codes = codes || !stage.scales_alone(k);
        for (int32_t buf : {want_codes ? c.to_buffer : -1, c.scale_buffer, c.global_buffer}) {
          if (buf < 0) continue;
          const int64_t n = plan.src.buffers[buf].byte_size;
          ASSERT_EQ(testing::FromDevice<char>(parts[buf], n), testing::FromDevice<char>(whole[buf], n))
              << "buffer " << plan.src.buffers[buf].name << (codes ? "" : " (scales alone)");
          ++compared;
        }
      }
    }
    EXPECT_GT(compared, 0);
    std::printf("PASS %s: %lld scratch buffers equal to Run's, rows quantized a tile row at a "
                "time (%lld of them gathered from strided rows)\n",
                engine.c_str(), static_cast<long long>(compared),
                static_cast<long long>(gathered));
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace refit
