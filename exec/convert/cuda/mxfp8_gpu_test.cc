// GPU check of the MXFP8 quantizer (convert_kernels.h through
// MakeCudaConvertOps, ScaleMode::kE8m0, 1 x 32 blocks): e4m3 codes and E8M0
// scale bytes bit-equal to the host loops (exec/convert/quantize.h) and to the
// independent reference of vLLM's formula (ReferenceMxfp8Quantize), for
// whole blocks (the vectorized kernel) and for blocks cut between two
// boxes whose amaxes are combined (the general kernels); the vectorized
// kernel and the warp-per-block kernel it leaves partial blocks and
// unaligned sources to, NaN and infinity refused by coordinates; then the
// fused quantizer's throughput next to a device copy. Prints PASS/FAIL lines and a
// FIGURE line; with no CUDA device it prints SKIP and REFIT_GPU_SKIP and
// exits 0.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/convert/quantize.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"
#include "testing/reference_quantizer.h"

namespace refit {
namespace {

using testing::FromDevice;
using testing::ToDevice;

// BF16 values over a wide range of magnitudes (blocks of tiny, zero and
// large values included), and their f32 values.
std::vector<uint16_t> WideBf16(int64_t n, uint32_t seed, std::vector<float>* values) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-130, 120);
  std::vector<uint16_t> out(n);
  values->resize(n);
  int e = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) e = ex(rng);  // one magnitude per block, mostly
    float x = std::ldexp(u(rng), (i % 97 == 0) ? e + 6 : e);
    if ((i / 32) % 17 == 3) x = 0.0f;  // all-zero blocks
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= 0xFFFF0000u;
    out[i] = static_cast<uint16_t>(b >> 16);
    std::memcpy(&(*values)[i], &b, 4);
  }
  return out;
}

// With REFIT_MXFP8_DUMP=DIR: the input and the kernel's output as files
// for gpu_check/mxfp8_torch_check.py (torch's own conversions).
void Dump(const char* name, const void* data, int64_t bytes) {
  const char* dir = std::getenv("REFIT_MXFP8_DUMP");
  if (dir == nullptr || *dir == 0) return;
  std::ofstream f(std::string(dir) + "/" + name, std::ios::binary);
  f.write(static_cast<const char*>(data), bytes);
}

int64_t Mismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n + static_cast<int64_t>(a.size() != b.size());
}

TEST(Mxfp8GpuTest, WholeAndCutBlocksEqualHostAndReference) {
  REFIT_SKIP_WITHOUT_GPU("mxfp8_gpu_test");
  const int64_t lead = 3, rows = 37, cols = 416;  // 13 blocks per row
  const int64_t n = lead * rows * cols;
  std::vector<float> values;
  const std::vector<uint16_t> bf16 = WideBf16(n, 7, &values);
  const testing::Quantized want = testing::ReferenceMxfp8Quantize(values, {lead, rows, cols});
  const std::vector<int64_t> tile = {1, 1, 32};
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto ops = MakeCudaConvertOps(s);
  // Whole blocks, one pass.
  char* in = ToDevice(bf16);
  char *out = nullptr, *scales = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 32), cudaSuccess);
  const Box box = Box::Unchecked({0, 0, 0}, {lead, rows, cols});
  ASSERT_TRUE(ops->QuantizeWhole(in, DType::kBF16, box, tile, ScaleMode::kE8m0, out, scales,
                                 "tensor w").ok());
  ASSERT_TRUE(ops->Sync().ok());
  const std::vector<uint8_t> codes = FromDevice<uint8_t>(out, n);
  const std::vector<uint8_t> bytes = FromDevice<uint8_t>(scales, n / 32);
  std::vector<uint8_t> host(n), host_scales(n / 32);
  auto amax = TileAmaxHost({reinterpret_cast<const char*>(bf16.data()), DType::kBF16, box}, tile);
  ASSERT_TRUE(amax.ok());
  QuantizeHost({reinterpret_cast<const char*>(bf16.data()), DType::kBF16, box}, tile, *amax,
               ScaleMode::kE8m0, host.data(), host_scales.data());
  const std::string shape = std::to_string(lead * rows) + " " + std::to_string(cols) + "\n";
  Dump("shape.txt", shape.data(), static_cast<int64_t>(shape.size()));
  Dump("in.bf16", bf16.data(), n * 2);
  Dump("codes.u8", codes.data(), n);
  Dump("scales.u8", bytes.data(), n / 32);
  EXPECT_EQ(Mismatches(codes, want.values), 0);
  EXPECT_EQ(Mismatches(bytes, want.scale_bytes), 0);
  EXPECT_EQ(Mismatches(codes, host), 0);
  EXPECT_EQ(Mismatches(bytes, host_scales), 0);
  std::printf("%s mxfp8 whole blocks: codes and E8M0 bytes equal the host and the reference "
              "(%lld elements)\n", HasFailure() ? "FAIL" : "PASS", static_cast<long long>(n));
  // Cut: columns [0, 200) and [200, 416) of every row, block 6 ([192,
  // 224)) cut; each part's amax of the cut block combined with the other's.
  const int64_t cut = 200;
  std::vector<uint8_t> got(n, 0), got_scales(n / 32, 0);
  std::vector<std::vector<float>> part_amax(2);
  std::vector<Box> parts = {Box::Unchecked({0, 0, 0}, {lead, rows, cut}),
                            Box::Unchecked({0, 0, cut}, {lead, rows, cols - cut})};
  std::vector<std::vector<uint16_t>> dense(2);
  for (int p = 0; p < 2; ++p) {
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = parts[p].origin(2); c < parts[p].limit(2); ++c) {
        dense[p].push_back(bf16[r * cols + c]);
      }
    }
    char* d = ToDevice(dense[p]);
    auto a = ops->TileAmax(d, DType::kBF16, parts[p], tile);
    ASSERT_TRUE(a.ok()) << a.status();
    part_amax[p] = *a;
    cudaFree(d);
  }
  // Tiles per row: part 0 holds blocks 0..6 (7), part 1 blocks 6..12 (7).
  for (int64_t r = 0; r < lead * rows; ++r) {
    float& a0 = part_amax[0][r * 7 + 6];
    float& a1 = part_amax[1][r * 7 + 0];
    a0 = a1 = std::fmax(a0, a1);
  }
  for (int p = 0; p < 2; ++p) {
    char* d = ToDevice(dense[p]);
    const int64_t m = static_cast<int64_t>(dense[p].size());
    char *o = nullptr, *sc = nullptr;
    const Box owned = OwnedTiles(parts[p], tile);
    const int64_t ns = UncheckedNumElements(owned);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&o), m), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sc), ns + 1), cudaSuccess);
    ASSERT_TRUE(ops->Quantize(d, DType::kBF16, parts[p], tile, part_amax[p], ScaleMode::kE8m0,
                              o, sc).ok());
    ASSERT_TRUE(ops->Sync().ok());
    const std::vector<uint8_t> po = FromDevice<uint8_t>(o, m);
    const std::vector<uint8_t> ps = FromDevice<uint8_t>(sc, ns);
    const int64_t w = parts[p].shape(2), ow = owned.shape(2);
    for (int64_t r = 0; r < lead * rows; ++r) {
      for (int64_t c = 0; c < w; ++c) got[r * cols + parts[p].origin(2) + c] = po[r * w + c];
      for (int64_t j = 0; j < ow; ++j) got_scales[r * 13 + owned.origin(2) + j] = ps[r * ow + j];
    }
    cudaFree(d);
    cudaFree(o);
    cudaFree(sc);
  }
  EXPECT_EQ(Mismatches(got, want.values), 0);
  EXPECT_EQ(Mismatches(got_scales, want.scale_bytes), 0);
  std::printf("%s mxfp8 blocks cut between two boxes: codes and E8M0 bytes equal the "
              "reference\n", HasFailure() ? "FAIL" : "PASS");
  cudaFree(in);
  cudaFree(out);
  cudaFree(scales);
  cudaStreamDestroy(s);
}

std::vector<int64_t> MxTile(const Box& box) {
  std::vector<int64_t> tile(box.rank(), 1);
  tile.back() = 32;
  return tile;
}

// One QuantizeWhole of `bf16` over `box` (1 x 32 blocks, E8M0) read from a
// device copy `offset` bytes past an allocation's start: its codes and
// scale bytes, and the status of the call and of Sync.
struct MxRun {
  std::vector<uint8_t> codes, scales;
  absl::Status status;
};
MxRun RunWhole(ConvertOps& ops, const std::vector<uint16_t>& bf16, const Box& box,
               int64_t offset, const char* what) {
  const int64_t n = static_cast<int64_t>(bf16.size());
  const int64_t ns = UncheckedNumElements(OwnedTiles(box, MxTile(box)));
  std::vector<uint8_t> padded(offset + n * 2, 0);
  std::memcpy(padded.data() + offset, bf16.data(), n * 2);
  char* in = ToDevice(padded);
  char *out = nullptr, *scales = nullptr;
  MxRun r;
  if (cudaMalloc(reinterpret_cast<void**>(&out), n + 1) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&scales), ns + 1) != cudaSuccess) {
    r.status = absl::InternalError("cudaMalloc");
    return r;
  }
  r.status = ops.QuantizeWhole(in + offset, DType::kBF16, box, MxTile(box), ScaleMode::kE8m0,
                               out, scales, what);
  if (r.status.ok()) r.status = ops.Sync();
  r.codes = FromDevice<uint8_t>(out, n);
  r.scales = FromDevice<uint8_t>(scales, ns);
  cudaFree(in);
  cudaFree(out);
  cudaFree(scales);
  return r;
}

// The vectorized kernel (rows of whole blocks, aligned) and the warp-per-
// block kernel it leaves the rest to (a partial last block, an unaligned
// source), on sizes whose last thread block is partly empty: codes and
// scale bytes equal the host loops (and the reference where it applies);
// then a NaN and an infinity are refused, the first one named.
TEST(Mxfp8GpuTest, VectorAndFallbackKernelsEqualHostAndRefuseNonFinite) {
  REFIT_SKIP_WITHOUT_GPU("mxfp8_gpu_test");
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto ops = MakeCudaConvertOps(s);
  struct Case {
    int64_t rows, cols, offset;
    const char* what;
  };
  const Case cases[] = {{1003, 4096, 0, "vector, 1003 x 4096"},
                        {7, 96, 0, "vector, 7 x 96"},
                        {301, 1000, 0, "warp per block, partial last block (1000 columns)"},
                        {64, 512, 2, "warp per block, source 2 bytes off 16-byte alignment"}};
  for (const Case& c : cases) {
    std::vector<float> values;
    const std::vector<uint16_t> bf16 = WideBf16(c.rows * c.cols, 11, &values);
    const Box box = Box::Unchecked({0, 0}, {c.rows, c.cols});
    const MxRun got = RunWhole(*ops, bf16, box, c.offset, "w");
    ASSERT_TRUE(got.status.ok()) << c.what << ": " << got.status;
    const char* host_in = reinterpret_cast<const char*>(bf16.data());
    auto amax = TileAmaxHost({host_in, DType::kBF16, box}, MxTile(box));
    ASSERT_TRUE(amax.ok()) << amax.status();
    std::vector<uint8_t> host(got.codes.size()), host_scales(got.scales.size());
    QuantizeHost({host_in, DType::kBF16, box}, MxTile(box), *amax, ScaleMode::kE8m0,
                 host.data(), host_scales.data());
    EXPECT_EQ(Mismatches(got.codes, host), 0) << c.what;
    EXPECT_EQ(Mismatches(got.scales, host_scales), 0) << c.what;
    if (c.cols % 32 == 0) {
      const testing::Quantized want = testing::ReferenceMxfp8Quantize(values, {c.rows, c.cols});
      EXPECT_EQ(Mismatches(got.codes, want.values), 0) << c.what;
      EXPECT_EQ(Mismatches(got.scales, want.scale_bytes), 0) << c.what;
    }
    std::printf("%s mxfp8 %s: codes and E8M0 bytes equal the host loops (and the reference)\n",
                HasFailure() ? "FAIL" : "PASS", c.what);
  }
  // Non-finite: a NaN at [700, col], an infinity after it in the next
  // block, another later; the NaN is named, in either half of its 32-bit
  // word (col 8 or 9).
  for (const int col : {8, 9}) {
    std::vector<float> values;
    std::vector<uint16_t> bf16 = WideBf16(1003 * 4096, 5, &values);
    bf16[700 * 4096 + 33] = 0x7F80;   // +inf
    bf16[700 * 4096 + col] = 0xFFC0;  // NaN
    bf16[900 * 4096 + 2] = 0xFF80;    // -inf
    const MxRun got = RunWhole(*ops, bf16, Box::Unchecked({0, 0}, {1003, 4096}), 0,
                               "tensor w, trainer rank 1");
    EXPECT_THAT(std::string(got.status.message()),
                ::testing::HasSubstr(absl::StrCat(
                    "tensor w, trainer rank 1: non-finite value at [700, ", col, "]")))
        << got.status;
    EXPECT_TRUE(ops->Sync().ok()) << "the flag is reset after an error is reported";
    std::printf("%s mxfp8 non-finite: %s\n", HasFailure() ? "FAIL" : "PASS",
                std::string(got.status.message()).c_str());
  }
  cudaStreamDestroy(s);
}

// Throughput: the MXFP8 quantizer reads 2 bytes and writes 1 + 1/32 per
// element; a device copy of the BF16 bytes reads and writes 2.
TEST(Mxfp8GpuTest, QuantizeThroughputNextToACopy) {
  REFIT_SKIP_WITHOUT_GPU("mxfp8_gpu_test");
  const int64_t rows = 16384, cols = 16384, n = rows * cols;
  char *in = nullptr, *out = nullptr, *scales = nullptr, *copy = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&copy), n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), n / 32), cudaSuccess);
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
    ASSERT_TRUE(ops->QuantizeWhole(in, DType::kBF16, box, {1, 32}, ScaleMode::kE8m0, out,
                                   scales, "w").ok());
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
  const double q_gbs = (3.0 * n + n / 32.0) / (best_q * 1e-3) / 1e9;
  const double c_gbs = (4.0 * n) / (best_c * 1e-3) / 1e9;
  std::printf("FIGURE mxfp8 quantize %lld bf16 elements: %.3f ms, %.0f GB/s moved; device "
              "copy of the bf16 bytes %.3f ms, %.0f GB/s moved; ratio %.2f\n",
              static_cast<long long>(n), best_q, q_gbs, best_c, c_gbs, q_gbs / c_gbs);
  cudaFree(in);
  cudaFree(copy);
  cudaFree(out);
  cudaFree(scales);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace refit
