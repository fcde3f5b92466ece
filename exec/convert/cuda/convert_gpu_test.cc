// GPU check of the conversion kernels (convert_kernels.h through
// MakeCudaConvertOps): FP8 bytes and scales bit-equal to the reference
// quantizer (whole tiles fused, and tiles cut between two boxes with their
// amaxes combined), ue8m0 scales, -exp within one ulp of the host, NaN named
// by its coordinates; then the fused quantizer's throughput next to a
// device-to-device copy. Prints PASS/FAIL lines and a figure; with no CUDA
// device it prints SKIP and REFIT_GPU_SKIP and exits 0.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/convert/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"
#include "testing/reference_quantizer.h"

namespace refit {
namespace {

using testing::FromDevice;
using testing::ToDevice;

// mul: tile amaxes of 896 give power-of-two float scales, which requantize
// to themselves; the requantization cases scale the values by 0.7.
std::vector<uint16_t> RandomBf16(int64_t n, uint32_t seed, std::vector<float>* values,
                                 float mul = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::uniform_int_distribution<int> big(0, 50);
  std::vector<uint16_t> out(n);
  values->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = u(rng) * (big(rng) == 0 ? 300.0f : 1.0f) * mul;
    uint32_t b;
    std::memcpy(&b, &x, 4);
    out[i] = static_cast<uint16_t>(b >> 16);
    b &= 0xFFFF0000u;
    std::memcpy(&(*values)[i], &b, 4);
  }
  return out;
}

// Rows of 260 columns take the general kernel; rows of 392 (a multiple of
// 8, 16-byte aligned) the vectorized BF16 one. Partial edge tiles in both.
// kPow2RequantE8m0 (DeepGEMM on SM100): the requantized codes, each scale
// its exponent byte.
TEST(ConvertGpuTest, WholeTilesEqualTheReference) {
  REFIT_SKIP_WITHOUT_GPU("convert_gpu_test");
  for (int64_t cols : {260, 392})
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPow2, ScaleMode::kPow2Requant,
                         ScaleMode::kPow2RequantE8m0}) {
    const bool ue8m0 = mode == ScaleMode::kPow2;
    const std::vector<int64_t> shape = {3, 300, cols}, tile = {1, 128, 128};
    std::vector<float> v;
    const bool bytes = mode == ScaleMode::kPow2RequantE8m0;
    const bool requant = mode == ScaleMode::kPow2Requant || bytes;
    std::vector<uint16_t> bf = RandomBf16(3 * 300 * cols, ue8m0 ? 1 : 2, &v, requant ? 0.7f : 1.0f);
    testing::Quantized want = testing::ReferenceQuantize(v, shape, 128, ue8m0);
    if (requant) {
      const testing::Quantized plain = want;
      want = testing::ReferenceRequantUe8m0(plain, shape, 128);
      EXPECT_NE(want.values, plain.values);  // the case tells the two apart
    }
    char* in = ToDevice(bf);
    char* out = nullptr;
    char* scales = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), v.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), want.scales.size() * 4), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    auto ops = MakeCudaConvertOps(s);
    absl::Status st = ops->QuantizeWhole(in, DType::kBF16, *Box::FromShape(shape), tile,
                                         mode, out, scales, "w");
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(ops->Sync().ok());
    EXPECT_EQ(FromDevice<uint8_t>(out, v.size()), want.values);
    if (bytes) {
      std::vector<uint8_t> exponents;
      for (float x : want.scales) {
        uint32_t b;
        std::memcpy(&b, &x, 4);
        exponents.push_back(static_cast<uint8_t>(b >> 23));
      }
      EXPECT_EQ(FromDevice<uint8_t>(scales, want.scales.size()), exponents);
    } else {
      EXPECT_EQ(FromDevice<float>(scales, want.scales.size()), want.scales);
    }
    std::printf("%s whole tiles, rows of %lld%s: %zu elements bit-equal to the reference\n",
                HasFailure() ? "FAIL" : "PASS", static_cast<long long>(cols),
                mode == ScaleMode::kPow2 ? " (ue8m0)"
                : mode == ScaleMode::kPow2Requant ? " (requantized to ue8m0)"
                : bytes ? " (requantized, exponent bytes: deepgemm-sm100)" : "",
                v.size());
    cudaFree(in);
    cudaFree(out);
    cudaFree(scales);
    cudaStreamDestroy(s);
  }
}

// kPow2RequantE8m0 (DeepGEMM on SM100) too: the cut tile's requantized codes
// and each part's owned tiles' exponent bytes.
TEST(ConvertGpuTest, CutTilesWithCombinedAmaxEqualTheReference) {
  REFIT_SKIP_WITHOUT_GPU("convert_gpu_test");
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPow2RequantE8m0}) {
  const bool requant = mode == ScaleMode::kPow2RequantE8m0;
  const std::vector<int64_t> shape = {300, 200}, tile = {128, 128};
  std::vector<float> v;
  std::vector<uint16_t> bf = RandomBf16(300 * 200, 3, &v, requant ? 0.7f : 1.0f);
  testing::Quantized want = testing::ReferenceQuantize(v, shape, 128, false);
  if (requant) want = testing::ReferenceRequantUe8m0(want, shape, 128);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto ops = MakeCudaConvertOps(s);
  // Rows [0, 150) and [150, 300): tile row 1 is cut.
  const Box parts[2] = {Box::Unchecked({0, 0}, {150, 200}),
                        Box::Unchecked({150, 0}, {150, 200})};
  std::vector<std::vector<float>> amax(2);
  std::vector<char*> in(2);
  for (int p = 0; p < 2; ++p) {
    std::vector<uint16_t> part(bf.begin() + parts[p].origin(0) * 200,
                               bf.begin() + parts[p].limit(0) * 200);
    in[p] = ToDevice(part);
    absl::StatusOr<std::vector<float>> a = ops->TileAmax(in[p], DType::kBF16, parts[p], tile);
    ASSERT_TRUE(a.ok()) << a.status();
    amax[p] = *a;
  }
  for (int j = 0; j < 2; ++j) {  // tile row 1: part 0's second row, part 1's first
    amax[0][2 + j] = amax[1][j] = std::fmax(amax[0][2 + j], amax[1][j]);
  }
  // Owned tile rows: part 0 rows 0 and 1, part 1 row 2 (2 tile columns).
  const int64_t owned_first[2] = {0, 2}, owned_rows[2] = {2, 1};
  for (int p = 0; p < 2; ++p) {
    char* out = nullptr;
    char* scales = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 150 * 200), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), 16), cudaSuccess);
    ASSERT_TRUE(ops->Quantize(in[p], DType::kBF16, parts[p], tile, amax[p], mode, out,
                              requant ? scales : nullptr).ok());
    ASSERT_TRUE(ops->Sync().ok());
    std::vector<uint8_t> got = FromDevice<uint8_t>(out, 150 * 200);
    std::vector<uint8_t> exp(want.values.begin() + parts[p].origin(0) * 200,
                             want.values.begin() + parts[p].limit(0) * 200);
    EXPECT_EQ(got, exp) << "part " << p;
    if (requant) {
      std::vector<uint8_t> bytes;
      for (int64_t k = owned_first[p] * 2; k < (owned_first[p] + owned_rows[p]) * 2; ++k) {
        uint32_t b;
        std::memcpy(&b, &want.scales[k], 4);
        bytes.push_back(static_cast<uint8_t>(b >> 23));
      }
      EXPECT_EQ(FromDevice<uint8_t>(scales, bytes.size()), bytes) << "part " << p;
    }
    cudaFree(out);
    cudaFree(scales);
    cudaFree(in[p]);
  }
  std::printf("%s cut tiles%s: both parts bit-equal to the reference\n",
              HasFailure() ? "FAIL" : "PASS",
              requant ? " (requantized, exponent bytes: deepgemm-sm100)" : "");
  cudaStreamDestroy(s);
  }
}

TEST(ConvertGpuTest, NegExpAndNonFinite) {
  REFIT_SKIP_WITHOUT_GPU("convert_gpu_test");
  std::vector<float> v;
  std::vector<uint16_t> bf = RandomBf16(1 << 16, 4, &v);
  char* in = ToDevice(bf);
  char* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), v.size() * 4), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto ops = MakeCudaConvertOps(s);
  ASSERT_TRUE(ops->Cast(in, DType::kBF16, v.size(), true, out).ok());
  ASSERT_TRUE(ops->Sync().ok());
  std::vector<float> got = FromDevice<float>(out, v.size()), host(v.size());
  CastF32Host(DType::kBF16, reinterpret_cast<const char*>(bf.data()), v.size(), true,
              host.data());
  int64_t exact = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (got[i] == host[i]) {
      ++exact;
      continue;
    }
    int32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &host[i], 4);
    EXPECT_LE(std::abs(a - b), 1) << v[i];
  }
  std::printf("%s -exp: %zu elements, %lld bit-equal to the host, the rest within 1 ulp\n",
              HasFailure() ? "FAIL" : "PASS", v.size(), static_cast<long long>(exact));
  // A NaN in a quantized weight is named by its coordinates. The check is
  // deferred to Sync(): a clean call before the bad one does not hide it,
  // and the error names the bad call's tensor.
  absl::Status st = ops->QuantizeWhole(in, DType::kBF16, Box::Unchecked({10, 0}, {200, 260}),
                                       {128, 128}, ScaleMode::kFloat, out, nullptr,
                                       "tensor good");
  bf[5 * 260 + 7] = 0x7FC0;
  char* bad_in = ToDevice(bf);
  if (st.ok()) {
    st = ops->QuantizeWhole(bad_in, DType::kBF16, Box::Unchecked({10, 0}, {200, 260}), {128, 128},
                            ScaleMode::kFloat, out, nullptr, "tensor w, trainer rank 3");
  }
  if (st.ok()) st = ops->Sync();
  EXPECT_THAT(st.message(),
              ::testing::HasSubstr("tensor w, trainer rank 3: non-finite value at [15, 7]"))
      << st;
  EXPECT_TRUE(ops->Sync().ok()) << "the flags are reset after an error is reported";
  std::printf("%s non-finite: %s\n", HasFailure() ? "FAIL" : "PASS",
              std::string(st.message()).c_str());
  cudaFree(bad_in);
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(s);
}

// Throughput: the fused quantizer reads 2 bytes and writes 1 (+ a scale
// per 16384 elements) per element; a device copy of the BF16 bytes reads
// and writes 2. Both as bytes moved per second.
TEST(ConvertGpuTest, QuantizeThroughputNextToACopy) {
  REFIT_SKIP_WITHOUT_GPU("convert_gpu_test");
  const int64_t rows = 16384, cols = 16384, n = rows * cols;
  char *in = nullptr, *out = nullptr, *scales = nullptr, *copy = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&copy), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 16384 * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(in, 0x3c, n * 2), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto ops = MakeCudaConvertOps(s);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const Box box = Box::Unchecked({0, 0}, {rows, cols});
  float best_q = 1e30f, best_c = 1e30f;
  for (int it = 0; it < 6; ++it) {
    float ms = 0;
    cudaEventRecord(a, s);
    ASSERT_TRUE(
        ops->QuantizeWhole(in, DType::kBF16, box, {128, 128}, ScaleMode::kFloat, out, scales,
                           "w").ok());
    cudaEventRecord(b, s);
    ASSERT_TRUE(ops->Sync().ok());
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    if (it > 0) best_q = std::fmin(best_q, ms);
    cudaEventRecord(a, s);
    cudaMemcpyAsync(copy, in, n * 2, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    if (it > 0) best_c = std::fmin(best_c, ms);
  }
  const double q_gbs = (3.0 * n + n / 16384 * 4) / (best_q * 1e-3) / 1e9;
  const double c_gbs = (4.0 * n) / (best_c * 1e-3) / 1e9;
  std::printf("FIGURE quantize %lld bf16 elements: %.3f ms, %.0f GB/s moved; device copy "
              "of the bf16 bytes %.3f ms, %.0f GB/s moved; ratio %.2f\n",
              static_cast<long long>(n), best_q, q_gbs, best_c, c_gbs, q_gbs / c_gbs);
  cudaFree(in);
  cudaFree(copy);
  cudaFree(out);
  cudaFree(scales);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace refit
