// GPU check of the transform kernel (transform_kernels.h): on random and
// exhaustive inputs, the device's x -> -exp(x) must match the host's
// ApplyTransformHost within the documented tolerance (transform.h: 1 ulp of
// the element type), change only the elements it is given, and reject an
// unknown dtype code. Prints "PASS <case>" / "FAIL <case>" per case; with no
// CUDA device it prints SKIP and REFIT_GPU_SKIP and exits 0.
//
// On a GPU host: dist/refit/transform_gpu_test (from tools/bundle), or
// `bazel test //exec/cuda:transform_gpu_test` where a GPU is present.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/cuda/transform_kernels.h"
#include "exec/transform.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REFIT_SKIP_WITHOUT_GPU()                                         \
  do {                                                                   \
    if (!HaveDevice()) {                                                 \
      std::printf("SKIP transform_gpu_test: no CUDA device "             \
                  "(REFIT_GPU_SKIP)\n");                                 \
      GTEST_SKIP() << "no CUDA device";                                  \
    }                                                                    \
  } while (0)

int Code(DType d) {
  switch (d) {
    case DType::kF32:
      return cuda::kTransformF32;
    case DType::kBF16:
      return cuda::kTransformBF16;
    default:
      return cuda::kTransformF16;
  }
}

// Runs the kernel over `bytes` (elements of `dtype`) on the device; the
// elements [first, first + count) are transformed. Returns the device's
// bytes.
std::vector<char> RunOnDevice(const std::vector<char>& bytes, DType dtype,
                              int64_t first, int64_t count) {
  const int64_t es = DTypeSize(dtype);
  char* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), bytes.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cuda::LaunchNegExp(d + first * es, count, Code(dtype), s), 0);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<char> out(bytes.size());
  EXPECT_EQ(cudaMemcpy(out.data(), d, out.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaStreamDestroy(s);
  cudaFree(d);
  return out;
}

uint32_t Bits(const std::vector<char>& b, int64_t i, int64_t es) {
  uint32_t u = 0;
  std::memcpy(&u, b.data() + i * es, es);
  return u;
}

// Compares device against host over `in`, transforming all but a guard
// element at each end. Prints PASS/FAIL with the count of exact matches.
void CheckCase(const std::string& name, DType dtype,
               const std::vector<char>& in) {
  const int64_t es = DTypeSize(dtype);
  const int64_t n = static_cast<int64_t>(in.size()) / es;
  ASSERT_GE(n, 3);
  std::vector<char> host = in;
  ASSERT_TRUE(ApplyTransformHost(Transform::kNegExp, dtype,
                                 host.data() + es, n - 2)
                  .ok());
  const std::vector<char> dev = RunOnDevice(in, dtype, 1, n - 2);
  int64_t exact = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = Bits(host, i, es), g = Bits(dev, i, es);
    if (i == 0 || i == n - 1) {
      EXPECT_EQ(g, Bits(in, i, es)) << name << ": guard element " << i
                                    << " was changed";
      continue;
    }
    if (h == g) ++exact;
    if (!TransformMatches(dtype, h, g) && ++bad <= 10) {
      ADD_FAILURE() << name << " element " << i << " input bits "
                    << Bits(in, i, es) << ": host " << h << ", device " << g;
    }
  }
  std::printf("%s %s: %lld elements, %lld bit-equal, %lld outside 1 ulp\n",
              bad == 0 ? "PASS" : "FAIL", name.c_str(),
              static_cast<long long>(n - 2), static_cast<long long>(exact),
              static_cast<long long>(bad));
}

TEST(TransformGpuTest, Fp32RandomMatchesHost) {
  REFIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> typical(-30.0f, 12.0f);
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 88.7f, 89.0f, -104.0f, -200.0f,
                          1e-40f, INFINITY, -INFINITY, NAN};
  for (int i = 0; i < (1 << 20); ++i) v.push_back(typical(rng));
  for (int i = 0; i < (1 << 18); ++i) {  // any bit pattern
    const uint32_t u = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  v.push_back(0.0f);
  std::vector<char> in(v.size() * 4);
  std::memcpy(in.data(), v.data(), in.size());
  CheckCase("fp32 random", DType::kF32, in);
}

TEST(TransformGpuTest, Bf16AndFp16EveryValueMatchesHost) {
  REFIT_SKIP_WITHOUT_GPU();
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<char> in(2 * (65536 + 2));
    for (uint32_t u = 0; u < 65536; ++u) {
      const uint16_t h = static_cast<uint16_t>(u);
      std::memcpy(in.data() + 2 * (u + 1), &h, 2);
    }
    CheckCase(std::string(DTypeName(d)) + " every value", d, in);
  }
}

TEST(TransformGpuTest, UnknownDtypeCodeIsRejected) {
  REFIT_SKIP_WITHOUT_GPU();
  char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 16), cudaSuccess);
  const int rc = cuda::LaunchNegExp(d, 4, 99, nullptr);
  cudaFree(d);
  EXPECT_NE(rc, 0);
  std::printf("%s unknown dtype code rejected\n", rc != 0 ? "PASS" : "FAIL");
}

}  // namespace
}  // namespace refit
