// GPU check of the NVFP4 quantizer (nvfp4_kernels.h): packed E2M1 codes,
// e4m3 block-scale bytes and global scales bit-equal to the host loops
// (exec/convert/nvfp4.h) and to the independent reference of ModelOpt's formula
// (ReferenceNvfp4Quantize), for whole tensors (amax pass, then quantize
// with in-kernel block amaxes) and for 16-blocks cut between two boxes
// whose block and global amaxes are combined; then the two passes'
// throughput next to a device copy. Prints PASS/FAIL lines and a FIGURE
// line; with no CUDA device it prints SKIP and REFIT_GPU_SKIP and exits 0.
// With REFIT_NVFP4_DUMP=DIR it writes the input and its output for
// gpu_check/nvfp4_torch_check.py.
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/convert/convert.h"
#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/convert/cuda/nvfp4_kernels.h"
#include "exec/convert/nvfp4.h"
#include "gtest/gtest.h"
#include "plan/conversion.h"
#include "testing/gpu_test.h"
#include "testing/reference_quantizer.h"

namespace refit {
namespace {

using testing::FromDevice;
using testing::ToDevice;

// BF16 values over many magnitudes per 16-block, all-zero blocks, values
// that land on E2M1 ties, negative zeros; and their f32 values.
std::vector<uint16_t> WideBf16(int64_t n, uint32_t seed, std::vector<float>* values) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-24, 24);
  std::vector<uint16_t> out(n);
  values->resize(n);
  int e = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 16 == 0) e = ex(rng);
    float x = std::ldexp(u(rng), e);
    if ((i / 16) % 17 == 3) x = 0.0f;
    if ((i / 16) % 19 == 5) x = (i % 3 == 0) ? -0.0f : std::ldexp(0.25f * (i % 25), -4);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= 0xFFFF0000u;
    out[i] = static_cast<uint16_t>(b >> 16);
    std::memcpy(&(*values)[i], &b, 4);
  }
  return out;
}

void Dump(const char* name, const void* data, int64_t bytes) {
  const char* dir = std::getenv("REFIT_NVFP4_DUMP");
  if (dir == nullptr || *dir == 0) return;
  std::ofstream f(std::string(dir) + "/" + name, std::ios::binary);
  f.write(static_cast<const char*>(data), bytes);
}

template <typename T>
int64_t Mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n + static_cast<int64_t>(a.size() != b.size());
}

cuda::DenseBox BoxOf(const char* d, int64_t L, int64_t R, int64_t C, int64_t c0) {
  return {d, cuda::kConvertBF16, L, R, C, 0, c0, 1, kNvfp4Block};
}

TEST(Nvfp4GpuTest, WholeAndCutBlocksEqualHostAndReference) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_gpu_test");
  const int64_t lead = 3, rows = 37, cols = 416;  // 26 blocks a row
  const int64_t n = lead * rows * cols;
  std::vector<float> values;
  std::vector<uint16_t> bf16 = WideBf16(n, 7, &values);
  // Expert 1 scaled by 2^40 and expert 2 by 2^-120: their blocks' divisors
  // lie outside the kernels' fast range (exec/convert/nvfp4_math.h) and divide.
  for (int64_t i = rows * cols; i < n; ++i) {
    const float x = std::ldexp(values[i], i < 2 * rows * cols ? 40 : -120);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= 0xFFFF0000u;
    bf16[i] = static_cast<uint16_t>(b >> 16);
    std::memcpy(&values[i], &b, 4);
  }
  const testing::Quantized want = testing::ReferenceNvfp4Quantize(values, {lead, rows, cols});
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  // Whole: the amax pass (global only), then in-kernel block amaxes.
  char* in = ToDevice(bf16);
  char* gamax = ToDevice(std::vector<float>(lead, 0.0f));
  char* bad = ToDevice(std::vector<long long>{LLONG_MAX});
  char *out = nullptr, *scales = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n / 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 16), cudaSuccess);
  const cuda::DenseBox whole = BoxOf(in, lead, rows, cols, 0);
  ASSERT_EQ(cuda::LaunchNvfp4Amax(whole, nullptr, reinterpret_cast<float*>(gamax),
                                  reinterpret_cast<long long*>(bad), s), 0);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> ga = FromDevice<float>(gamax, lead);
  EXPECT_EQ(FromDevice<long long>(bad, 1)[0], LLONG_MAX);
  std::vector<float> g;
  for (float a : ga) g.push_back(Nvfp4GlobalScale(a));
  const Box box = Box::Unchecked({0, 0, 0}, {lead, rows, cols});
  const HostDenseBox host_in{reinterpret_cast<const char*>(bf16.data()), DType::kBF16, box};
  auto bamax = TileAmaxHost(host_in, {1, 1, kNvfp4Block});
  ASSERT_TRUE(bamax.ok());
  std::vector<uint8_t> host(n / 2), host_scales(n / 16);
  QuantizeNvfp4Host(host_in, *bamax, g, host.data(), host_scales.data());
  EXPECT_EQ(Mismatches(g, want.global_scales), 0);
  {
    ASSERT_EQ(cudaMemsetAsync(out, 0xEE, n / 2, s), cudaSuccess);
    ASSERT_EQ(cuda::LaunchNvfp4Quantize(whole, nullptr, reinterpret_cast<float*>(gamax),
                                        reinterpret_cast<unsigned char*>(out),
                                        reinterpret_cast<unsigned char*>(scales), s), 0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<uint8_t> codes = FromDevice<uint8_t>(out, n / 2);
    const std::vector<uint8_t> bytes = FromDevice<uint8_t>(scales, n / 16);
    {
      const std::string shape = std::to_string(lead * rows) + " " + std::to_string(cols) + " " +
                                std::to_string(rows) + "\n";
      Dump("shape.txt", shape.data(), static_cast<int64_t>(shape.size()));
      Dump("in.bf16", bf16.data(), n * 2);
      Dump("codes.u8", codes.data(), n / 2);
      Dump("scales.u8", bytes.data(), n / 16);
      Dump("global.f32", g.data(), lead * 4);
    }
    EXPECT_EQ(Mismatches(codes, want.values), 0);
    EXPECT_EQ(Mismatches(bytes, want.scale_bytes), 0);
    EXPECT_EQ(Mismatches(codes, host), 0);
    EXPECT_EQ(Mismatches(bytes, host_scales), 0);
    std::printf("%s nvfp4 whole tensor: packed codes, e4m3 scale bytes and global scales "
                "equal the host and the reference (%lld elements)\n",
                HasFailure() ? "FAIL" : "PASS", static_cast<long long>(n));
  }
  // Cut: columns [0, 200) and [200, 416), block 12 ([192, 208)) cut.
  const int64_t cut = 200;
  const int64_t widths[2] = {cut, cols - cut}, origins[2] = {0, cut};
  const int64_t tiles[2] = {13, 14};  // intersecting 16-blocks a row
  std::vector<std::vector<uint16_t>> dense(2);
  std::vector<std::vector<float>> part_amax(2);
  std::vector<float> part_global(lead, 0.0f);
  std::vector<char*> dev(2);
  for (int p = 0; p < 2; ++p) {
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = origins[p]; c < origins[p] + widths[p]; ++c) {
        dense[p].push_back(bf16[r * cols + c]);
      }
    }
    dev[p] = ToDevice(dense[p]);
    char* pa = ToDevice(std::vector<float>(lead * rows * tiles[p], 0.0f));
    char* pg = ToDevice(std::vector<float>(lead, 0.0f));
    ASSERT_EQ(cuda::LaunchNvfp4Amax(BoxOf(dev[p], lead, rows, widths[p], origins[p]),
                                    reinterpret_cast<float*>(pa), reinterpret_cast<float*>(pg),
                                    reinterpret_cast<long long*>(bad), s), 0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    part_amax[p] = FromDevice<float>(pa, lead * rows * tiles[p]);
    const std::vector<float> pgv = FromDevice<float>(pg, lead);
    for (int64_t l = 0; l < lead; ++l) part_global[l] = std::fmax(part_global[l], pgv[l]);
    cudaFree(pa);
    cudaFree(pg);
  }
  for (int64_t r = 0; r < lead * rows; ++r) {
    float& a0 = part_amax[0][r * tiles[0] + 12];
    float& a1 = part_amax[1][r * tiles[1] + 0];
    a0 = a1 = std::fmax(a0, a1);
  }
  EXPECT_EQ(Mismatches(part_global, ga), 0);
  char* dg = ToDevice(part_global);
  std::vector<uint8_t> got(n / 2, 0), got_scales(n / 16, 0);
  for (int p = 0; p < 2; ++p) {
    const int64_t owned0 = (origins[p] + 15) / 16;
    const int64_t owned = (origins[p] + widths[p] + 15) / 16 - owned0;
    char* pa = ToDevice(part_amax[p]);
    char *o = nullptr, *sc = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&o), lead * rows * widths[p] / 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sc), lead * rows * owned), cudaSuccess);
    ASSERT_EQ(cuda::LaunchNvfp4Quantize(
                  BoxOf(dev[p], lead, rows, widths[p], origins[p]),
                  reinterpret_cast<float*>(pa), reinterpret_cast<float*>(dg),
                  reinterpret_cast<unsigned char*>(o), reinterpret_cast<unsigned char*>(sc), s),
              0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<uint8_t> po = FromDevice<uint8_t>(o, lead * rows * widths[p] / 2);
    const std::vector<uint8_t> ps = FromDevice<uint8_t>(sc, lead * rows * owned);
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = 0; c < widths[p] / 2; ++c) {
        got[r * cols / 2 + origins[p] / 2 + c] = po[r * widths[p] / 2 + c];
      }
      for (int64_t j = 0; j < owned; ++j) got_scales[r * 26 + owned0 + j] = ps[r * owned + j];
    }
    cudaFree(pa);
    cudaFree(o);
    cudaFree(sc);
  }
  EXPECT_EQ(Mismatches(got, want.values), 0);
  EXPECT_EQ(Mismatches(got_scales, want.scale_bytes), 0);
  std::printf("%s nvfp4 blocks cut between two boxes: codes and scale bytes equal the "
              "reference\n", HasFailure() ? "FAIL" : "PASS");
  for (char* d : dev) cudaFree(d);
  cudaFree(dg);
  cudaFree(in);
  cudaFree(gamax);
  cudaFree(bad);
  cudaFree(out);
  cudaFree(scales);
  cudaStreamDestroy(s);
}

// The same through MakeCudaConvertOps (what the Converter calls): pass 1
// with and without block amaxes, pass 2 with in-kernel and with given block
// amaxes, and the global scales written; all equal to the host ops.
TEST(Nvfp4GpuTest, ConvertOpsEqualTheHostOps) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_gpu_test");
  const int64_t lead = 2, rows = 9, cols = 160;
  const int64_t n = lead * rows * cols;
  std::vector<float> values;
  const std::vector<uint16_t> bf16 = WideBf16(n, 5, &values);
  const Box box = Box::Unchecked({0, 0, 0}, {lead, rows, cols});
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto gpu = MakeCudaConvertOps(s);
  auto host = MakeHostConvertOps();
  char* in = ToDevice(bf16);
  auto ga = gpu->Nvfp4Amax(in, DType::kBF16, box, true);
  auto ha = host->Nvfp4Amax(reinterpret_cast<const char*>(bf16.data()), DType::kBF16, box, true);
  ASSERT_TRUE(ga.ok() && ha.ok()) << ga.status() << ha.status();
  EXPECT_EQ(ga->global, ha->global);
  EXPECT_EQ(ga->block, ha->block);
  for (bool given : {false, true}) {
    const std::vector<float> blocks = given ? ha->block : std::vector<float>{};
    char *out = nullptr, *scales = nullptr, *global = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n / 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 16), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&global), lead * 4), cudaSuccess);
    ASSERT_TRUE(gpu->QuantizeNvfp4(in, DType::kBF16, box, Nvfp4Recipe::kModelopt, blocks, ha->global, out, scales,
                                   global).ok());
    ASSERT_TRUE(gpu->Sync().ok());
    std::vector<uint8_t> ho(n / 2), hs(n / 16);
    std::vector<float> hg(lead);
    ASSERT_TRUE(host->QuantizeNvfp4(reinterpret_cast<const char*>(bf16.data()), DType::kBF16,
                                    box, Nvfp4Recipe::kModelopt, blocks, ha->global, reinterpret_cast<char*>(ho.data()),
                                    reinterpret_cast<char*>(hs.data()),
                                    reinterpret_cast<char*>(hg.data())).ok());
    EXPECT_EQ(Mismatches(FromDevice<uint8_t>(out, n / 2), ho), 0);
    EXPECT_EQ(Mismatches(FromDevice<uint8_t>(scales, n / 16), hs), 0);
    EXPECT_EQ(Mismatches(FromDevice<float>(global, lead), hg), 0);
    cudaFree(out);
    cudaFree(scales);
    cudaFree(global);
  }
  // The deferred global amaxes (many records behind one wait), and a NaN
  // reported by the Sync() after them, naming its record and element.
  std::vector<float> g1, g2;
  ASSERT_TRUE(gpu->Nvfp4GlobalAmax(in, DType::kBF16, box, &g1, "first").ok());
  std::vector<uint16_t> with_nan = bf16;
  with_nan[rows * cols + 7] = 0x7FC0;
  char* nan_in = ToDevice(with_nan);
  ASSERT_TRUE(gpu->Nvfp4GlobalAmax(in, DType::kBF16, box, &g2, "second").ok());
  ASSERT_TRUE(gpu->Sync().ok());
  EXPECT_EQ(g1, ha->global);
  EXPECT_EQ(g2, ha->global);
  std::vector<float> g3;
  ASSERT_TRUE(gpu->Nvfp4GlobalAmax(nan_in, DType::kBF16, box, &g3, "planted").ok());
  const absl::Status st = gpu->Sync();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("planted: non-finite value at [1, 0, 7]"),
            std::string::npos) << st;
  cudaFree(nan_in);
  std::printf("%s nvfp4 through the CUDA ConvertOps: amaxes (also deferred), codes, scales and "
              "global scales equal the host ops; a NaN is named\n",
              HasFailure() ? "FAIL" : "PASS");
  cudaFree(in);
  cudaStreamDestroy(s);
}

// The thresholds (a box of at least kNvfp4TableMinBlocks 16-blocks) write
// the arithmetic's bytes (the same data as boxes below that size), also
// for blocks holding an infinity or a NaN and a leading index whose
// global amax is not finite, which take the arithmetic in either kernel.
TEST(Nvfp4GpuTest, ThresholdsWriteTheArithmeticsBytes) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_gpu_test");
  const int64_t lead = 2, rows = 64, cols = 4096, n = lead * rows * cols;
  const int64_t part_rows = 16;  // the arithmetic's boxes: part_rows rows of one leading index
  ASSERT_GE(n / 16, cuda::kNvfp4TableMinBlocks);
  ASSERT_LT(part_rows * cols / 16, cuda::kNvfp4TableMinBlocks);
  std::vector<float> values;
  std::vector<uint16_t> bf16 = WideBf16(n, 13, &values);
  for (int64_t i = 5; i < n; i += 9973) bf16[i] = (i % 3 == 0) ? 0x7F80 : (i % 3 == 1 ? 0xFF80 : 0x7FC1);
  char* in = ToDevice(bf16);
  const std::vector<float> global = {1e6f, std::numeric_limits<float>::infinity()};
  char* gamax = ToDevice(global);
  char *out = nullptr, *scales = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n / 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 16), cudaSuccess);
  auto* codes_out = reinterpret_cast<unsigned char*>(out);
  auto* scales_out = reinterpret_cast<unsigned char*>(scales);
  // By arithmetic: each leading index's rows in boxes of part_rows.
  ASSERT_EQ(cudaMemset(out, 0xEE, n / 2), cudaSuccess);
  for (int64_t l = 0; l < lead; ++l) {
    for (int64_t r = 0; r < rows; r += part_rows) {
      const int64_t at = (l * rows + r) * cols;  // the part's first element
      ASSERT_EQ(cuda::LaunchNvfp4Quantize(BoxOf(in + 2 * at, 1, part_rows, cols, 0), nullptr,
                                          reinterpret_cast<float*>(gamax) + l,
                                          codes_out + at / 2, scales_out + at / 16, nullptr),
                0);
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> want_codes = FromDevice<uint8_t>(out, n / 2);
  const std::vector<uint8_t> want_scales = FromDevice<uint8_t>(scales, n / 16);
  // By thresholds: the whole box at once.
  ASSERT_EQ(cudaMemset(out, 0xEE, n / 2), cudaSuccess);
  ASSERT_EQ(cuda::LaunchNvfp4Quantize(BoxOf(in, lead, rows, cols, 0), nullptr,
                                      reinterpret_cast<float*>(gamax), codes_out, scales_out,
                                      nullptr),
            0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(Mismatches(FromDevice<uint8_t>(out, n / 2), want_codes), 0);
  EXPECT_EQ(Mismatches(FromDevice<uint8_t>(scales, n / 16), want_scales), 0);
  std::printf("%s nvfp4 by thresholds, non-finite values and global amax included: the "
              "arithmetic's bytes\n", HasFailure() ? "FAIL" : "PASS");
  cudaFree(in);
  cudaFree(gamax);
  cudaFree(out);
  cudaFree(scales);
}

// Throughput of both passes (the amax pass reads the BF16 bytes, the
// quantize pass reads them again and writes 1/2 + 1/16 byte per element)
// next to a device copy of the BF16 bytes (reads and writes 2).
TEST(Nvfp4GpuTest, QuantizeThroughputNextToACopy) {
  REFIT_SKIP_WITHOUT_GPU("nvfp4_gpu_test");
  const int64_t rows = 16384, cols = 16384, n = rows * cols;
  char *in = nullptr, *out = nullptr, *scales = nullptr, *copy = nullptr, *g = nullptr,
       *bad = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&copy), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n / 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&g), 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&bad), 8), cudaSuccess);
  {  // Weights as a trained model has them: N(0, 0.02), 16M of them repeated.
    const int64_t chunk = int64_t{1} << 24;
    const std::vector<uint16_t> w = testing::TrainedBf16(chunk, 9);
    for (int64_t at = 0; at < n; at += chunk) {
      ASSERT_EQ(cudaMemcpy(in + 2 * at, w.data(), 2 * chunk, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const cuda::DenseBox box = BoxOf(in, 1, rows, cols, 0);
  float best_q = 1e30f, best_c = 1e30f, best_a = 1e30f, best_p2 = 1e30f;
  cudaEvent_t mid;
  cudaEventCreate(&mid);
  for (int it = 0; it < 6; ++it) {
    float ms = 0, ms_a = 0, ms_p2 = 0;
    cudaEventRecord(a, s);
    cudaMemsetAsync(g, 0, 4, s);
    ASSERT_EQ(cuda::LaunchNvfp4Amax(box, nullptr, reinterpret_cast<float*>(g),
                                    reinterpret_cast<long long*>(bad), s), 0);
    cudaEventRecord(mid, s);
    ASSERT_EQ(cuda::LaunchNvfp4Quantize(box, nullptr, reinterpret_cast<float*>(g),
                                        reinterpret_cast<unsigned char*>(out),
                                        reinterpret_cast<unsigned char*>(scales), s), 0);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    cudaEventElapsedTime(&ms_a, a, mid);
    cudaEventElapsedTime(&ms_p2, mid, b);
    if (it > 0) {
      best_q = std::fmin(best_q, ms);
      best_a = std::fmin(best_a, ms_a);
      best_p2 = std::fmin(best_p2, ms_p2);
    }
    cudaEventRecord(a, s);
    cudaMemcpyAsync(copy, in, n * 2, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    if (it > 0) best_c = std::fmin(best_c, ms);
  }
  const double q_gbs = (4.0 * n + n / 2.0 + n / 16.0) / (best_q * 1e-3) / 1e9;
  const double c_gbs = (4.0 * n) / (best_c * 1e-3) / 1e9;
  std::printf("FIGURE nvfp4 quantize (amax + quantize passes) %lld bf16 N(0, 0.02) elements: "
              "%.3f ms, "
              "%.0f GB/s moved; device copy of the bf16 bytes %.3f ms, %.0f GB/s moved; "
              "bandwidth ratio %.2f, time ratio copy/quantize %.2f\n",
              static_cast<long long>(n), best_q, q_gbs, best_c, c_gbs, q_gbs / c_gbs,
              best_c / best_q);
  std::printf("FIGURE nvfp4 passes alone: amax %.3f ms (%.0f GB/s read), quantize %.3f ms "
              "(%.0f GB/s read and written)\n",
              best_a, 2.0 * n / (best_a * 1e-3) / 1e9, best_p2,
              (2.0 * n + n / 2.0 + n / 16.0) / (best_p2 * 1e-3) / 1e9);
  const double one_gbs = (2.0 * n + n / 2.0 + n / 16.0) / (best_p2 * 1e-3) / 1e9;
  std::printf("FIGURE nvfp4 one pass with the global scale known (the quantize pass alone): "
              "bandwidth ratio %.2f of the device copy\n", one_gbs / c_gbs);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaEventDestroy(mid);
  cudaFree(in);
  cudaFree(copy);
  cudaFree(out);
  cudaFree(scales);
  cudaFree(g);
  cudaFree(bad);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace refit
