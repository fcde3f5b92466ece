// DeepGEMM's SM100 packed UE8M0 scales on a GPU: the kernel's bytes equal
// the host path's for weights with partial tiles, unaligned rows and stacked
// experts; with REFIT_DEEPGEMM_SM100_DUMP set, each case's tile scales and
// the kernel's bytes are written there (case_<i>.txt: experts n k;
// case_<i>.f32, case_<i>.i32) for gpu_check/deepgemm_sm100_check.py, which
// compares them with DeepGEMM's torch statement of the same conversion.
// Prints SKIP without a device.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "exec/convert/cuda/deepgemm_sm100_kernels.h"
#include "exec/convert/deepgemm_sm100_scales.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"

namespace refit {
namespace {

TEST(DeepgemmSm100GpuTest, KernelEqualsHost) {
  REFIT_SKIP_WITHOUT_GPU("deepgemm_sm100_gpu_test");
  struct Case {
    int64_t experts, n, k;
  };
  const Case cases[] = {{1, 4096, 4096}, {1, 130, 700}, {1, 1, 1}, {8, 768, 2048 + 128},
                        {3, 98, 1536}};
  const char* dump = std::getenv("REFIT_DEEPGEMM_SM100_DUMP");
  std::mt19937 rng(11);
  int idx = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.experts << " x [" << c.n << ", " << c.k << "]");
    const int64_t tiles = c.experts * ((c.n + 127) / 128) * ((c.k + 127) / 128);
    std::vector<float> s(tiles);
    for (float& x : s) x = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);
    const int64_t bytes = c.experts * DeepgemmSm100Scales(c.n, c.k).bytes();
    std::vector<uint8_t> want(bytes);
    ASSERT_TRUE(PackDeepgemmSm100Scales(s, c.experts, c.n, c.k, absl::MakeSpan(want), "w").ok());
    char* din = testing::ToDevice(s);
    char* dout = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dout), bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0xAB, bytes), cudaSuccess);  // every byte must be written
    ASSERT_EQ(cuda::LaunchPackDeepgemmSm100Scales(reinterpret_cast<const float*>(din), c.experts,
                                                  c.n, c.k, reinterpret_cast<uint8_t*>(dout),
                                                  nullptr),
              cudaSuccess);
    const std::vector<uint8_t> got = testing::FromDevice<uint8_t>(dout, bytes);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes));
    if (dump != nullptr) {
      const std::string base = std::string(dump) + "/case_" + std::to_string(idx);
      std::ofstream(base + ".txt") << c.experts << " " << c.n << " " << c.k << "\n";
      std::ofstream(base + ".f32", std::ios::binary)
          .write(reinterpret_cast<const char*>(s.data()), s.size() * 4);
      std::ofstream(base + ".i32", std::ios::binary)
          .write(reinterpret_cast<const char*>(got.data()), got.size());
    }
    cudaFree(din);
    cudaFree(dout);
    ++idx;
  }
  std::printf("deepgemm_sm100_gpu_test: %d cases, kernel == host\n", idx);
}

}  // namespace
}  // namespace refit
