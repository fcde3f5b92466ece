// The host path of vLLM's online NVFP4 recipe against the plainly written
// reference (testing/reference_nvfp4_vllm.h): every finite BF16 value,
// under several global scales, and trained-like experts.
#include "exec/convert/nvfp4_vllm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "exec/convert/quantize.h"
#include "gtest/gtest.h"
#include "testing/reference_nvfp4_vllm.h"

namespace refit {
namespace {

float Bf16(uint16_t h) { return LoadAsF32(DType::kBF16, reinterpret_cast<const char*>(&h)); }

// Quantizes `bits` (a multiple of 16) as one expert with amax `amax` by
// both paths; fails naming the first byte that differs.
void ExpectSameAsReference(const std::vector<uint16_t>& bits, float amax) {
  SCOPED_TRACE(::testing::Message() << "amax " << amax);
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = Bf16(bits[i]);
  const int64_t n = static_cast<int64_t>(bits.size());
  const testing::Quantized want =
      testing::ReferenceVllmNvfp4Quantize(values, {n / 16, 16}, {amax});
  const float g = Nvfp4VllmGlobalScale(amax);
  ASSERT_EQ(g, want.scales[0]);
  std::vector<uint8_t> codes(n / 2), scales(n / 16);
  QuantizeNvfp4VllmHost(bits.data(), n / 16, g, codes.data(), scales.data());
  for (int64_t b = 0; b < n / 16; ++b) {
    ASSERT_EQ(scales[b], want.scale_bytes[b]) << "block " << b << " starting " << values[b * 16];
  }
  for (int64_t i = 0; i < n / 2; ++i) {
    ASSERT_EQ(codes[i], want.values[i]) << "elements " << values[2 * i] << ", "
                                        << values[2 * i + 1];
  }
}

TEST(Nvfp4VllmTest, EveryFiniteBf16UnderSeveralGlobalScales) {
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 7) & 0xFF) != 0xFF) all.push_back(static_cast<uint16_t>(h));
  }
  ASSERT_EQ(all.size() % 16, 0u);
  // The data's own amax, amaxes below most values (blocks saturate), the
  // clamp at 1e-8, and an amax whose g differs from the true quotient.
  uint16_t odd = 0x3c03;
  for (float amax : {3.3895314e38f, 1.0f, 0.02f, 3e-5f, 0.0f, Bf16(odd)}) {
    ExpectSameAsReference(all, amax);
  }
}

TEST(Nvfp4VllmTest, TrainedExpertsMatchTheReference) {
  std::mt19937 rng(7);
  for (float sigma : {0.02f, 1.5f, 1e-6f}) {
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<uint16_t> bits(64 * 256);
    float amax = 0.0f;
    for (uint16_t& h : bits) {
      const float x = normal(rng);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      h = static_cast<uint16_t>(u >> 16);
      amax = std::fmax(amax, std::fabs(Bf16(h)));
    }
    bits[5] = 0x8000;  // -0.0: code 8
    ExpectSameAsReference(bits, amax);
  }
}

// The device's reciprocals go where the host model's would: a functor that
// answers 1 / x rounded down by an ulp changes the bytes (the path really
// takes `rcp`).
TEST(Nvfp4VllmTest, HostPathTakesTheGivenReciprocal) {
  std::vector<uint16_t> bits(16 * 64);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(0x3c00 + 7 * i);
  const float g = Nvfp4VllmGlobalScale(Bf16(bits.back()));
  std::vector<uint8_t> c1(bits.size() / 2), s1(bits.size() / 16), c2 = c1, s2 = s1;
  QuantizeNvfp4VllmHost(bits.data(), bits.size() / 16, g, c1.data(), s1.data());
  QuantizeNvfp4VllmHost(bits.data(), bits.size() / 16, g, c2.data(), s2.data(),
                        [](float x) { return std::nextafter(1.0f / x, 0.0f) * 0.999f; });
  EXPECT_NE(c1, c2);
}

// The box path: experts [2, 3, 64] with a global scale each equal the
// reference, and the same experts cut at column 24 (a block split between
// two boxes, each quantizing its part with the whole block's amax) give
// the same codes, and each block scale once, from the box owning it.
TEST(Nvfp4VllmTest, BoxesWholeAndCutMatchTheReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t E = 2, R = 3, C = 64;
  std::vector<uint16_t> bits(E * R * C);
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const float x = normal(rng);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    bits[i] = static_cast<uint16_t>(u >> 16);
    values[i] = Bf16(bits[i]);
  }
  const std::vector<float> amax = {0.07f, 0.05f};  // the parameters' (over more parts)
  const testing::Quantized want = testing::ReferenceVllmNvfp4Quantize(values, {E, R, C}, amax);
  const std::vector<float> g = {Nvfp4VllmGlobalScale(amax[0]), Nvfp4VllmGlobalScale(amax[1])};
  std::vector<uint8_t> codes(bits.size() / 2), scales(bits.size() / 16);
  const char* data = reinterpret_cast<const char*>(bits.data());
  QuantizeNvfp4VllmBoxHost({data, DType::kBF16, Box::Unchecked({0, 0, 0}, {E, R, C})}, {}, g,
                           codes.data(), scales.data());
  EXPECT_EQ(codes, want.values);
  EXPECT_EQ(scales, want.scale_bytes);
  EXPECT_EQ(Nvfp4VllmWeightScale2Of(g[1]), want.global_scales[1]);
  // Cut at column 24: the block amaxes of the intersecting tiles.
  std::vector<uint8_t> cut_codes(codes.size()), cut_scales(scales.size(), 0xEE);
  for (const auto& [c0, c1] : {std::pair<int64_t, int64_t>{0, 24}, {24, 64}}) {
    const int64_t first = c0 / 16, tiles = (c1 + 15) / 16 - first, owned0 = (c0 + 15) / 16;
    std::vector<uint16_t> part;
    std::vector<float> block_amax;
    for (int64_t row = 0; row < E * R; ++row) {
      part.insert(part.end(), bits.begin() + row * C + c0, bits.begin() + row * C + c1);
      for (int64_t t = first; t < first + tiles; ++t) {
        float v = 0.0f;
        for (int64_t i = 0; i < 16; ++i) v = std::max(v, std::fabs(values[row * C + t * 16 + i]));
        block_amax.push_back(v);
      }
    }
    std::vector<uint8_t> pc(part.size() / 2), ps(E * R * ((c1 + 15) / 16 - owned0));
    QuantizeNvfp4VllmBoxHost({reinterpret_cast<const char*>(part.data()), DType::kBF16,
                              Box::Unchecked({0, 0, c0}, {E, R, c1 - c0})},
                             block_amax, g, pc.data(), ps.data());
    const int64_t owned = (c1 + 15) / 16 - owned0;
    for (int64_t row = 0; row < E * R; ++row) {
      for (int64_t j = 0; j < (c1 - c0) / 2; ++j) {
        cut_codes[row * C / 2 + c0 / 2 + j] = pc[row * (c1 - c0) / 2 + j];
      }
      for (int64_t j = 0; j < owned; ++j) cut_scales[row * C / 16 + owned0 + j] = ps[row * owned + j];
    }
  }
  EXPECT_EQ(cut_codes, want.values);
  EXPECT_EQ(cut_scales, want.scale_bytes);
}

}  // namespace
}  // namespace refit
