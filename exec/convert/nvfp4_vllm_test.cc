// The host path of vLLM's online NVFP4 recipe against the plainly written
// reference (testing/reference_nvfp4_vllm.h): every finite BF16 value,
// under several global scales, and trained-like experts.
#include "exec/convert/nvfp4_vllm.h"

#include <cmath>
#include <cstring>
#include <random>
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

}  // namespace
}  // namespace refit
