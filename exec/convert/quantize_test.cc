#include "exec/convert/quantize.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/reference_quantizer.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = static_cast<uint16_t>(u >> 16);  // values are exact in bf16
  }
  return out;
}

// Random values exact in bf16, spanning several binades, a few large.
std::vector<float> RandomBf16Values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::uniform_int_distribution<int> big(0, 50);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = u(rng) * (big(rng) == 0 ? 300.0f : 1.0f);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= 0xFFFF0000u;
    std::memcpy(&x, &b, 4);
    v[i] = x;
  }
  return v;
}

TEST(E4M3Test, MatchesTheSearchReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  std::vector<float> xs = {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, 1e9f, -1e9f,
                           0.015625f, 0.0009765625f, 0.00146484375f, 0.001953125f,
                           1.0625f, 1.1875f, 240.0f, 248.0f, 1e-30f};
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng) * std::pow(2.0f, -(i % 16)));
  for (float x : xs) {
    EXPECT_EQ(F32ToE4M3(x), testing::ReferenceE4M3(x)) << x;
  }
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(F32ToE4M3(E4M3ToF32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(BlockScaleTest, Ue8m0RoundsUpToAPowerOfTwo) {
  EXPECT_EQ(BlockScale(448.0f, ScaleMode::kFloat), 1.0f);
  EXPECT_EQ(BlockScale(448.0f, ScaleMode::kPow2), 1.0f);
  EXPECT_EQ(BlockScale(449.0f, ScaleMode::kPow2), 2.0f);
  EXPECT_EQ(BlockScale(0.0f, ScaleMode::kFloat), 1e-4f / 448.0f);
  EXPECT_EQ(BlockScale(3.0f, ScaleMode::kPow2), std::ldexp(1.0f, -7));  // 3/448 = 0.0067
}

// DeepGEMM on SM100: kPow2Requant's codes and scales, each scale written as
// its exponent byte.
TEST(QuantizeHostTest, RequantExponentBytesAreTheRequantScalesBits) {
  const std::vector<int64_t> shape = {200, 300}, tile = {128, 128};
  std::vector<float> v = RandomBf16Values(200 * 300, 5);
  for (float& x : v) x *= 0.7f;
  const std::vector<uint16_t> bf = ToBf16(v);
  const HostDenseBox in{reinterpret_cast<const char*>(bf.data()), DType::kBF16,
                        Box::Unchecked({0, 0}, {200, 300})};
  absl::StatusOr<std::vector<float>> amax = TileAmaxHost(in, tile);
  ASSERT_TRUE(amax.ok()) << amax.status();
  std::vector<uint8_t> q(v.size()), qb(v.size()), bytes(amax->size());
  std::vector<float> scales(amax->size());
  QuantizeHost(in, tile, *amax, ScaleMode::kPow2Requant, q.data(), scales.data());
  QuantizeHost(in, tile, *amax, ScaleMode::kPow2RequantE8m0, qb.data(), bytes.data());
  EXPECT_EQ(qb, q);
  EXPECT_EQ(ScaleElementSize(ScaleMode::kPow2RequantE8m0), 1);
  for (size_t k = 0; k < scales.size(); ++k) {
    uint32_t b;
    std::memcpy(&b, &scales[k], 4);
    EXPECT_EQ(bytes[k], b >> 23) << "tile " << k;
    EXPECT_EQ(BlockScale((*amax)[k], ScaleMode::kPow2RequantE8m0), scales[k]);
  }
}

// Two boxes cutting the same tiles give the reference's bytes once their
// partial amaxes are combined: what the senders do after the exchange.
// kPow2Requant: vLLM's DeepGEMM requantization of the float-scale bytes.
TEST(QuantizeHostTest, SplitBoxesWithCombinedAmaxEqualTheReference) {
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPow2, ScaleMode::kPow2Requant}) {
    const bool ue8m0 = mode == ScaleMode::kPow2;
    const std::vector<int64_t> shape = {2, 300, 200}, tile = {1, 128, 128};
    std::vector<float> v = RandomBf16Values(2 * 300 * 200, 4 - static_cast<int>(mode));
    if (mode == ScaleMode::kPow2Requant) {
      // Tile amaxes of 896 give power-of-two float scales, which requantize
      // to themselves: scale the values so that they do not.
      for (float& x : v) {
        x *= 0.7f;
        uint32_t b;
        std::memcpy(&b, &x, 4);
        b &= 0xFFFF0000u;
        std::memcpy(&x, &b, 4);
      }
    }
    testing::Quantized want = testing::ReferenceQuantize(v, shape, 128, ue8m0);
    if (mode == ScaleMode::kPow2Requant) {
      const testing::Quantized plain = want;
      want = testing::ReferenceRequantUe8m0(plain, shape, 128);
      // The requantized codes differ from the float-scale ones somewhere.
      EXPECT_NE(want.values, plain.values);
    }
    const std::vector<uint16_t> bf = ToBf16(v);
    // Rows [0, 150) and [150, 300) of both experts: tile row 1 is cut.
    std::vector<Box> boxes = {Box::Unchecked({0, 0, 0}, {2, 150, 200}),
                              Box::Unchecked({0, 150, 0}, {2, 150, 200})};
    std::vector<std::vector<uint16_t>> parts(2);
    std::vector<std::vector<float>> amax(2);
    for (int p = 0; p < 2; ++p) {
      for (int64_t e = 0; e < 2; ++e) {
        for (int64_t r = 0; r < 150; ++r) {
          const uint16_t* row = &bf[(e * 300 + boxes[p].origin(1) + r) * 200];
          parts[p].insert(parts[p].end(), row, row + 200);
        }
      }
      absl::StatusOr<std::vector<float>> a = TileAmaxHost(
          {reinterpret_cast<const char*>(parts[p].data()), DType::kBF16, boxes[p]}, tile);
      ASSERT_TRUE(a.ok()) << a.status();
      amax[p] = *a;
    }
    // Box 0 intersects tile rows 0..1, box 1 tile rows 1..2 (per expert, 2
    // tile columns): tile row 1 is the cut one.
    for (int64_t e = 0; e < 2; ++e) {
      for (int64_t c = 0; c < 2; ++c) {
        float& a0 = amax[0][(e * 2 + 1) * 2 + c];
        float& a1 = amax[1][(e * 2 + 0) * 2 + c];
        a0 = a1 = std::fmax(a0, a1);
      }
    }
    for (int p = 0; p < 2; ++p) {
      std::vector<uint8_t> out(2 * 150 * 200);
      const Box owned = OwnedTiles(boxes[p], tile);
      std::vector<float> scales(UncheckedNumElements(owned));
      QuantizeHost({reinterpret_cast<const char*>(parts[p].data()), DType::kBF16, boxes[p]},
                   tile, amax[p], mode, out.data(), scales.data());
      for (int64_t e = 0; e < 2; ++e) {
        for (int64_t r = 0; r < 150; ++r) {
          for (int64_t c = 0; c < 200; ++c) {
            const int64_t g = (e * 300 + boxes[p].origin(1) + r) * 200 + c;
            ASSERT_EQ(out[(e * 150 + r) * 200 + c], want.values[g])
                << "part " << p << " expert " << e << " row " << r << " col " << c;
          }
        }
      }
      int64_t k = 0;
      for (int64_t e = 0; e < 2; ++e) {
        for (int64_t i = owned.origin(1); i < owned.limit(1); ++i) {
          for (int64_t j = 0; j < 2; ++j) {
            EXPECT_EQ(scales[k++], want.scales[(e * 3 + i) * 2 + j]);
          }
        }
      }
    }
  }
}

TEST(QuantizeHostTest, NonFiniteNamesTheElement) {
  std::vector<float> v = RandomBf16Values(4 * 6, 5);
  v[9] = std::nanf("");
  const std::vector<uint16_t> bf = ToBf16(v);
  absl::StatusOr<std::vector<float>> a = TileAmaxHost(
      {reinterpret_cast<const char*>(bf.data()), DType::kBF16,
       Box::Unchecked({10, 0}, {4, 6})},
      {128, 128});
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("at [11, 3]"));
}

TEST(CastF32HostTest, NegExpWithinOneUlpOfFloatExp) {
  const std::vector<float> v = RandomBf16Values(1000, 6);
  const std::vector<uint16_t> bf = ToBf16(v);
  std::vector<float> out(v.size());
  CastF32Host(DType::kBF16, reinterpret_cast<const char*>(bf.data()), v.size(), true,
              out.data());
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = -std::exp(v[i]);
    if (out[i] == want) continue;  // also both -inf
    EXPECT_LE(std::fabs(out[i] - want), std::fabs(std::nextafter(want, 0.0f) - want))
        << v[i];
  }
  CastF32Host(DType::kBF16, reinterpret_cast<const char*>(bf.data()), v.size(), false,
              out.data());
  EXPECT_EQ(out, v);
}

// vLLM's MXFP8 scale: ceil(log2(max(amax, 2^-126) / 448)) + 127, clamped.
TEST(Mxfp8Test, ScaleBytesAtTheEdges) {
  EXPECT_EQ(E8m0ScaleByte(448.0f), 127);   // 448 / 448 = 2^0
  EXPECT_EQ(E8m0ScaleByte(449.0f), 128);
  EXPECT_EQ(E8m0ScaleByte(1.0f), 119);     // log2(1/448) = -8.8
  EXPECT_EQ(E8m0ScaleByte(0.0f), 0);       // all-zero block: clamped to 0
  EXPECT_EQ(E8m0ScaleByte(3.0e38f), 247);  // 2^127.8 / 448 -> 2^119
  EXPECT_EQ(BlockScale(896.0f, ScaleMode::kE8m0), 2.0f);
  EXPECT_EQ(BlockScale(0.0f, ScaleMode::kE8m0), std::ldexp(1.0f, -127));
  EXPECT_EQ(ScaleElementSize(ScaleMode::kE8m0), 1);
}

// Codes and E8M0 bytes of whole rows and of rows cut mid-block (their
// amaxes combined) equal the reference of vLLM's formula, on values from
// 2^-140 to 2^100 with all-zero blocks.
TEST(Mxfp8Test, WholeAndCutRowsEqualTheReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 100);
  const int64_t rows = 9, cols = 160;
  std::vector<float> v(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    static int e = 0;
    if (i % 32 == 0) e = ex(rng);
    v[i] = (i / 32) % 7 == 2 ? 0.0f : std::ldexp(u(rng), e + (i % 13 == 0 ? 5 : 0));
  }
  const std::vector<uint16_t> b = ToBf16(v);
  for (float& x : v) {  // the bf16 values
    uint32_t w;
    std::memcpy(&w, &x, 4);
    w &= 0xFFFF0000u;
    std::memcpy(&x, &w, 4);
  }
  const testing::Quantized want = testing::ReferenceMxfp8Quantize(v, {rows, cols});
  const std::vector<int64_t> tile = {1, 32};
  // Cut at column 70 (inside block 2).
  std::vector<uint8_t> codes(rows * cols), scales(rows * cols / 32);
  std::vector<std::vector<uint16_t>> part(2);
  const int64_t cut = 70;
  const Box boxes[2] = {Box::Unchecked({0, 0}, {rows, cut}),
                        Box::Unchecked({0, cut}, {rows, cols - cut})};
  std::vector<std::vector<float>> amax(2);
  for (int p = 0; p < 2; ++p) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = boxes[p].origin(1); c < boxes[p].limit(1); ++c) {
        part[p].push_back(b[r * cols + c]);
      }
    }
    amax[p] = TileAmaxHost({reinterpret_cast<const char*>(part[p].data()), DType::kBF16,
                            boxes[p]}, tile).value();
  }
  for (int64_t r = 0; r < rows; ++r) {  // part 0: blocks 0..2, part 1: 2..4
    const float m = std::fmax(amax[0][r * 3 + 2], amax[1][r * 3]);
    amax[0][r * 3 + 2] = amax[1][r * 3] = m;
  }
  for (int p = 0; p < 2; ++p) {
    const int64_t w = boxes[p].shape(1);
    const Box owned = OwnedTiles(boxes[p], tile);
    std::vector<uint8_t> out(rows * w), sc(UncheckedNumElements(owned));
    QuantizeHost({reinterpret_cast<const char*>(part[p].data()), DType::kBF16, boxes[p]}, tile,
                 amax[p], ScaleMode::kE8m0, out.data(), sc.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < w; ++c) codes[r * cols + boxes[p].origin(1) + c] = out[r * w + c];
      for (int64_t j = 0; j < owned.shape(1); ++j) {
        scales[r * 5 + owned.origin(1) + j] = sc[r * owned.shape(1) + j];
      }
    }
  }
  EXPECT_EQ(codes, want.values);
  EXPECT_EQ(scales, want.scale_bytes);
}

}  // namespace
}  // namespace refit
