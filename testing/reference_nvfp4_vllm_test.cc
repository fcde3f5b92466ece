#include "testing/reference_nvfp4_vllm.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace refit::testing {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// torch's order: amax 0x3c03 (BF16) gives g = RN(RN(1 / a) * 2688) =
// 0x48a42716, where the true quotient RN(2688 / a) is 0x48a42715 (found
// with a standalone C program over the BF16 amaxes in [2^-8, 2)).
TEST(ReferenceVllmNvfp4Test, GlobalScaleIsTorchsReciprocalTimes2688) {
  const float a = FromBits(0x3c030000u);
  EXPECT_EQ(Bits(ReferenceVllmNvfp4GlobalScale(a)), 0x48a42716u);
  EXPECT_EQ(ReferenceVllmNvfp4GlobalScale(4.0f), 672.0f);
  EXPECT_EQ(ReferenceVllmNvfp4WeightScale2(672.0f), 1.0f / 672.0f);
  // clamp_min(1e-8): an all-zero expert keeps a finite scale.
  EXPECT_EQ(ReferenceVllmNvfp4GlobalScale(0.0f), ReferenceVllmNvfp4GlobalScale(1e-8f));
  EXPECT_TRUE(std::isfinite(ReferenceVllmNvfp4GlobalScale(0.0f)));
}

TEST(ReferenceVllmNvfp4Test, RcpModelRoundsAndFlushes) {
  EXPECT_EQ(Bits(RcpModel(6.0f)), 0x3e2aaaabu);
  EXPECT_EQ(RcpModel(4.0f), 0.25f);
  EXPECT_EQ(RcpModel(std::numeric_limits<float>::denorm_min()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(RcpModel(3e38f), 0.0f);  // 1 / 3e38 is subnormal: flushed
}

// A block worked by hand with g = 672 (amax 4): s = 672 * 4/6 = 448
// (e4m3 0x7E), o = 1 / (448 / 672) = 1.5 within an ulp, and every product
// x * o lies away from an E2M1 rounding bound, so the codes hold for any
// faithful reciprocal.
TEST(ReferenceVllmNvfp4Test, BlockWorkedByHand) {
  const float x[16] = {4, 2, 1, -3, 0.25f, -0.0f, 0, 3.5f, -1.25f, 0.125f, -0.125f, 0, 0, 0, 0, 0};
  const uint8_t want[16] = {7, 5, 3, 0xE, 1, 8, 0, 7, 0xC, 0, 8, 0, 0, 0, 0, 0};
  uint8_t scale = 0, codes[16];
  ReferenceVllmNvfp4Block(x, ReferenceVllmNvfp4GlobalScale(4.0f), RcpModel, &scale, codes);
  EXPECT_EQ(scale, 0x7E);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(codes[i], want[i]) << i;
  // A block of BF16 0.001 (0.00099945...): s = 672 * v / 6 = 0.1119 ->
  // e4m3 1.75 * 2^-4 (0x1E); x * o = 6.14 saturates at 6 (code 7).
  float small[16];
  for (float& v : small) v = 0.00099945068359375f;
  ReferenceVllmNvfp4Block(small, 672.0f, RcpModel, &scale, codes);
  EXPECT_EQ(scale, 0x1E);
  for (uint8_t c : codes) EXPECT_EQ(c, 7);
}

// Per expert: its own amax (or the given one), weight_scale_2 = 1 / g,
// codes packed two a byte with the even element low.
TEST(ReferenceVllmNvfp4Test, ExpertsQuantizeWithTheirOwnGlobalScale) {
  std::vector<float> w(2 * 1 * 16, 0.0f);
  w[0] = 4.0f;         // expert 0: amax 4
  w[1] = 2.0f;
  w[16] = 1.0f;        // expert 1: amax 1
  w[17] = -1.0f;
  const Quantized q = ReferenceVllmNvfp4Quantize(w, {2, 1, 16});
  ASSERT_EQ(q.values.size(), 16u);
  ASSERT_EQ(q.scale_bytes.size(), 2u);
  ASSERT_EQ(q.scales.size(), 2u);
  EXPECT_EQ(q.scales[0], 672.0f);
  EXPECT_EQ(q.scales[1], 2688.0f);
  EXPECT_EQ(q.global_scales[0], 1.0f / 672.0f);
  EXPECT_EQ(q.values[0], 7 | 5 << 4);    // 4 -> 6, 2 -> 3
  EXPECT_EQ(q.values[8], 7 | 0xF << 4);  // 1 -> 6, -1 -> -6
  EXPECT_EQ(q.scale_bytes[0], 0x7E);
  EXPECT_EQ(q.scale_bytes[1], 0x7E);
  // A given amax (the expert's max over its TP shards) replaces the own.
  const Quantized shared = ReferenceVllmNvfp4Quantize(w, {2, 1, 16}, {8.0f, 8.0f});
  EXPECT_EQ(shared.scales[1], 336.0f);
}

// The SM100 scales of a 130 x 700 weight (2 x 6 tiles): 132 rows (4-aligned)
// of two int32 each, stored MN-major; every byte at its offset by the
// formula ((c / 4) * 132 + r) * 4 + c % 4, padding zero.
TEST(ReferenceDeepgemmSm100Test, PacksRowExponentsMnMajor) {
  const int64_t n = 130, k = 700, kb = 6;
  std::vector<float> tiles(2 * kb);
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t c = 0; c < kb; ++c) tiles[t * kb + c] = std::ldexp(1.0f, static_cast<int>(t * kb + c) - 10);
  }
  const std::vector<uint8_t> got = ReferenceDeepgemmSm100Scales(tiles, n, k);
  ASSERT_EQ(got.size(), 2u * 132u * 4u);
  std::vector<uint8_t> want(got.size(), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < kb; ++c) {
      want[((c / 4) * 132 + r) * 4 + c % 4] = static_cast<uint8_t>(127 + (r / 128) * kb + c - 10);
    }
  }
  EXPECT_EQ(got, want);
}

// The smallest e with 2^e >= q (q > 0 normal).
int CeilLog2(float q) {
  int e = std::ilogb(q);
  if (std::ldexp(1.0f, e) < q) ++e;
  return e;
}

// FlashInfer's MXFP8 quantizer (cvt_warp_fp16_to_mxfp8, quantization_utils.cuh
// at 014327a; vLLM's mxfp8_e4m3_quantize on SM100) takes the E8M0 exponent of
// v * rcp(448) rounded up, vLLM's torch formula ceil(log2(v / 448)): with
// rcp(448) = RN(1 / 448) they agree for every normal BF16 block amax, so the
// two quantizers' bytes are equal where the GPU's rcp.approx(448) is
// RN(1 / 448) (gpu_check/nvfp4_vllm_check.py prints it).
TEST(ReferenceVllmNvfp4Test, FlashinferMxfp8ExponentEqualsTorchFormula) {
  const float rcp448 = RcpModel(448.0f);
  int checked = 0;
  for (uint32_t h = 0x0080; h < 0x7F80; ++h) {
    const float v = FromBits(h << 16);
    ASSERT_EQ(CeilLog2(v * rcp448), CeilLog2(v / 448.0f)) << "block amax " << v;
    ++checked;
  }
  EXPECT_EQ(checked, 0x7F00);
}

}  // namespace
}  // namespace refit::testing
