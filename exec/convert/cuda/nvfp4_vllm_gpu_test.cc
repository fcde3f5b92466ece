// vLLM's online NVFP4 kernel on a GPU: bit-equal to the host path given the
// device's own rcp.approx.ftz.f32 results (so everything but the
// instruction, which vLLM's kernel uses too, is checked), the bytes the
// host's reciprocal model changes counted, and, with REFIT_NVFP4_VLLM_DUMP
// set, the input and the kernel's bytes written there for
// gpu_check/nvfp4_vllm_check.py (shape.txt, in.bf16, codes.u8, scales.u8,
// global.f32). Prints SKIP without a device.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/convert/cuda/nvfp4_vllm_kernels.h"
#include "exec/convert/convert.h"
#include "exec/convert/nvfp4_vllm.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"

namespace refit {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rcp.approx.ftz.f32 of each of `args` on the device.
std::vector<float> DeviceRcp(const std::vector<float>& args) {
  char* in = testing::ToDevice(args);
  char* out = testing::ToDevice(std::vector<float>(args.size()));
  EXPECT_EQ(cuda::LaunchRcpApprox(reinterpret_cast<const float*>(in),
                                  reinterpret_cast<float*>(out),
                                  static_cast<int64_t>(args.size()), nullptr),
            cudaSuccess);
  std::vector<float> r = testing::FromDevice<float>(out, static_cast<int64_t>(args.size()));
  cudaFree(in);
  cudaFree(out);
  return r;
}

void Write(const std::string& path, const void* p, size_t n) {
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(p), n);
}

TEST(Nvfp4VllmGpuTest, KernelEqualsHostWithTheDevicesReciprocals) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_vllm_gpu_test");
  const int64_t experts = 4, rows = 256, cols = 1024, n = rows * cols, blocks = n / 16;
  const char* dump = std::getenv("REFIT_NVFP4_VLLM_DUMP");
  std::vector<uint16_t> all_in;
  std::vector<uint8_t> all_codes, all_scales;
  std::vector<float> globals;
  int64_t model_codes = 0, model_scales = 0;
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<uint16_t> in = testing::TrainedBf16(n, static_cast<uint32_t>(11 + e));
    if (e == 3) {
      for (int64_t i = 0; i < n; i += 97) in[i] = static_cast<uint16_t>(in[i] ^ 0x1000);  // wider
    }
    float amax = 0.0f;
    for (uint16_t h : in) {
      const uint32_t u = (static_cast<uint32_t>(h) << 16) & 0x7FFFFFFFu;
      float f;
      std::memcpy(&f, &u, 4);
      amax = std::fmax(amax, f);
    }
    const float g = Nvfp4VllmGlobalScale(amax);
    char* din = testing::ToDevice(in);
    char* dcodes = testing::ToDevice(std::vector<uint8_t>(n / 2));
    char* dscales = testing::ToDevice(std::vector<uint8_t>(blocks));
    ASSERT_EQ(cuda::LaunchNvfp4VllmQuantize(reinterpret_cast<const uint16_t*>(din), blocks, g,
                                            reinterpret_cast<uint8_t*>(dcodes),
                                            reinterpret_cast<uint8_t*>(dscales), nullptr),
              cudaSuccess);
    const std::vector<uint8_t> codes = testing::FromDevice<uint8_t>(dcodes, n / 2);
    const std::vector<uint8_t> scales = testing::FromDevice<uint8_t>(dscales, blocks);
    cudaFree(din);
    cudaFree(dcodes);
    cudaFree(dscales);
    // The device's reciprocals of every argument the recipe can take: 6, g,
    // and f32(S) * rcp(g) for each e4m3 byte S.
    const float rcp_g = DeviceRcp({g})[0];
    std::vector<float> args = {6.0f, g};
    for (int b = 1; b < 0x7F; ++b) {
      const uint32_t e = b >> 3, m = b & 7;
      const float sv = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                              : std::ldexp(1.0f + m / 8.0f, static_cast<int>(e) - 7);
      args.push_back(sv * rcp_g);
    }
    const std::vector<float> got = DeviceRcp(args);
    std::unordered_map<uint32_t, float> table;
    for (size_t i = 0; i < args.size(); ++i) table[Bits(args[i])] = got[i];
    std::vector<uint8_t> hc(n / 2), hs(blocks), mc(n / 2), ms(blocks);
    QuantizeNvfp4VllmHost(in.data(), blocks, g, hc.data(), hs.data(), [&](float x) {
      auto it = table.find(Bits(x));
      EXPECT_NE(it, table.end()) << "no device reciprocal of " << x;
      return it == table.end() ? 0.0f : it->second;
    });
    EXPECT_EQ(hs, scales) << "expert " << e;
    EXPECT_EQ(hc, codes) << "expert " << e;
    QuantizeNvfp4VllmHost(in.data(), blocks, g, mc.data(), ms.data());
    for (int64_t i = 0; i < n / 2; ++i) model_codes += mc[i] != codes[i];
    for (int64_t i = 0; i < blocks; ++i) model_scales += ms[i] != scales[i];
    all_in.insert(all_in.end(), in.begin(), in.end());
    all_codes.insert(all_codes.end(), codes.begin(), codes.end());
    all_scales.insert(all_scales.end(), scales.begin(), scales.end());
    globals.push_back(g);
  }
  std::printf("nvfp4_vllm_gpu_test: the host's reciprocal model changes %lld of %lld code "
              "bytes and %lld of %lld block scales (rcp.approx.ftz.f32 vs RN(1/x))\n",
              static_cast<long long>(model_codes), static_cast<long long>(experts * n / 2),
              static_cast<long long>(model_scales), static_cast<long long>(experts * blocks));
  if (dump != nullptr) {
    const std::string d(dump);
    std::ofstream(d + "/shape.txt") << experts << " " << rows << " " << cols << "\n";
    Write(d + "/in.bf16", all_in.data(), all_in.size() * 2);
    Write(d + "/codes.u8", all_codes.data(), all_codes.size());
    Write(d + "/scales.u8", all_scales.data(), all_scales.size());
    Write(d + "/global.f32", globals.data(), globals.size() * 4);
  }
}

// The box kernel the converter launches (LaunchNvfp4VllmQuantizeBox) on
// experts [2, 64, 96]: equal to the contiguous kernel per expert, and, cut
// at column 40 into two boxes given the cut block's whole amax, the same
// codes and every block scale once.
TEST(Nvfp4VllmGpuTest, BoxKernelWholeAndCutEqualTheBlockKernel) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_vllm_gpu_test");
  const int64_t E = 2, R = 64, C = 96, n = E * R * C;
  const std::vector<uint16_t> in = testing::TrainedBf16(n, 5);
  std::vector<float> g(E);
  for (int64_t e = 0; e < E; ++e) g[e] = Nvfp4VllmGlobalScale(0.05f + 0.03f * e);
  std::vector<uint8_t> want_codes, want_scales;
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<uint16_t> part(in.begin() + e * R * C, in.begin() + (e + 1) * R * C);
    char* din = testing::ToDevice(part);
    char* dc = testing::ToDevice(std::vector<uint8_t>(R * C / 2));
    char* ds = testing::ToDevice(std::vector<uint8_t>(R * C / 16));
    ASSERT_EQ(cuda::LaunchNvfp4VllmQuantize(reinterpret_cast<const uint16_t*>(din), R * C / 16,
                                            g[e], reinterpret_cast<uint8_t*>(dc),
                                            reinterpret_cast<uint8_t*>(ds), nullptr),
              cudaSuccess);
    const std::vector<uint8_t> c = testing::FromDevice<uint8_t>(dc, R * C / 2);
    const std::vector<uint8_t> sc = testing::FromDevice<uint8_t>(ds, R * C / 16);
    want_codes.insert(want_codes.end(), c.begin(), c.end());
    want_scales.insert(want_scales.end(), sc.begin(), sc.end());
    cudaFree(din);
    cudaFree(dc);
    cudaFree(ds);
  }
  char* dg = testing::ToDevice(g);
  std::vector<uint8_t> codes(n / 2), scales(n / 16, 0xEE);
  for (const auto& [c0, c1] : {std::pair<int64_t, int64_t>{0, C}, {0, 40}, {40, C}}) {
    const int64_t w = c1 - c0, first = c0 / 16, tiles = (c1 + 15) / 16 - first;
    const int64_t owned0 = (c0 + 15) / 16, owned = (c1 + 15) / 16 - owned0;
    std::vector<uint16_t> part;
    std::vector<float> block_amax;
    for (int64_t row = 0; row < E * R; ++row) {
      part.insert(part.end(), in.begin() + row * C + c0, in.begin() + row * C + c1);
      for (int64_t t = first; t < first + tiles; ++t) {
        float v = 0.0f;
        for (int64_t i = 0; i < 16; ++i) {
          const uint32_t u = static_cast<uint32_t>(in[row * C + t * 16 + i] & 0x7FFF) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          v = std::fmax(v, f);
        }
        block_amax.push_back(v);
      }
    }
    char* din = testing::ToDevice(part);
    char* da = testing::ToDevice(block_amax);
    char* dc = testing::ToDevice(std::vector<uint8_t>(E * R * w / 2));
    char* ds = testing::ToDevice(std::vector<uint8_t>(E * R * owned));
    const cuda::DenseBox b{din, cuda::kConvertBF16, E, R, w, 0, c0, 1, 16};
    ASSERT_EQ(cuda::LaunchNvfp4VllmQuantizeBox(
                  b, w == C ? nullptr : reinterpret_cast<const float*>(da),
                  reinterpret_cast<const float*>(dg), reinterpret_cast<uint8_t*>(dc),
                  reinterpret_cast<uint8_t*>(ds), nullptr),
              cudaSuccess);
    const std::vector<uint8_t> pc = testing::FromDevice<uint8_t>(dc, E * R * w / 2);
    const std::vector<uint8_t> ps = testing::FromDevice<uint8_t>(ds, E * R * owned);
    if (w == C) {
      EXPECT_EQ(pc, want_codes) << "whole box";
      EXPECT_EQ(ps, want_scales) << "whole box";
    } else {
      for (int64_t row = 0; row < E * R; ++row) {
        for (int64_t j = 0; j < w / 2; ++j) codes[row * C / 2 + c0 / 2 + j] = pc[row * w / 2 + j];
        for (int64_t j = 0; j < owned; ++j) scales[row * C / 16 + owned0 + j] = ps[row * owned + j];
      }
    }
    cudaFree(din);
    cudaFree(da);
    cudaFree(dc);
    cudaFree(ds);
  }
  cudaFree(dg);
  EXPECT_EQ(codes, want_codes) << "cut at column 40";
  EXPECT_EQ(scales, want_scales) << "cut at column 40";
}

// The converter's device ops with Nvfp4Recipe::kVllm (what a GPU trainer
// runs): per expert of a [2, 64, 96] box, the codes and scales of the
// block kernel with SFScale of the expert's global amax, and vLLM's
// weight_scale_2 = RN(1 / SFScale) as the global scale.
TEST(Nvfp4VllmGpuTest, ConvertOpsQuantizeByTheVllmRecipe) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_vllm_gpu_test");
  const int64_t E = 2, R = 64, C = 96, n = E * R * C;
  const std::vector<uint16_t> in = testing::TrainedBf16(n, 9);
  const std::vector<float> amax = {0.06f, 0.11f};
  char* din = testing::ToDevice(in);
  char* dc = testing::ToDevice(std::vector<uint8_t>(n / 2));
  char* ds = testing::ToDevice(std::vector<uint8_t>(n / 16));
  char* dg = testing::ToDevice(std::vector<float>(E));
  std::unique_ptr<ConvertOps> ops = MakeCudaConvertOps(nullptr);
  ASSERT_TRUE(ops->QuantizeNvfp4(din, DType::kBF16, Box::Unchecked({0, 0, 0}, {E, R, C}),
                                 Nvfp4Recipe::kVllm, {}, amax, dc, ds, dg).ok());
  ASSERT_TRUE(ops->Sync().ok());
  const std::vector<uint8_t> codes = testing::FromDevice<uint8_t>(dc, n / 2);
  const std::vector<uint8_t> scales = testing::FromDevice<uint8_t>(ds, n / 16);
  const std::vector<float> kept = testing::FromDevice<float>(dg, E);
  for (int64_t e = 0; e < E; ++e) {
    const float g = Nvfp4VllmGlobalScale(amax[e]);
    EXPECT_EQ(kept[e], Nvfp4VllmWeightScale2Of(g)) << "expert " << e;
    char* wc = testing::ToDevice(std::vector<uint8_t>(R * C / 2));
    char* wsc = testing::ToDevice(std::vector<uint8_t>(R * C / 16));
    ASSERT_EQ(cuda::LaunchNvfp4VllmQuantize(reinterpret_cast<const uint16_t*>(din) + e * R * C,
                                            R * C / 16, g, reinterpret_cast<uint8_t*>(wc),
                                            reinterpret_cast<uint8_t*>(wsc), nullptr),
              cudaSuccess);
    EXPECT_EQ(testing::FromDevice<uint8_t>(wc, R * C / 2),
              std::vector<uint8_t>(codes.begin() + e * R * C / 2,
                                   codes.begin() + (e + 1) * R * C / 2)) << "expert " << e;
    EXPECT_EQ(testing::FromDevice<uint8_t>(wsc, R * C / 16),
              std::vector<uint8_t>(scales.begin() + e * R * C / 16,
                                   scales.begin() + (e + 1) * R * C / 16)) << "expert " << e;
    cudaFree(wc);
    cudaFree(wsc);
  }
  for (char* p : {din, dc, ds, dg}) cudaFree(p);
}

}  // namespace
}  // namespace refit
