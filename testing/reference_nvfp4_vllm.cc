#include "testing/reference_nvfp4_vllm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace refit::testing {
namespace {

// The value of an e4m3 (OCP fn) byte, by its fields.
float E4m3Value(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                           : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (b & 0x80) != 0 ? -mag : mag;
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

float RcpModel(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  float r = 1.0f / x;
  if (std::fpclassify(r) == FP_SUBNORMAL) r = std::copysign(0.0f, r);
  return r;
}

float ReferenceVllmNvfp4GlobalScale(float amax) {
  const float a = std::max(amax, 1e-8f);
  const float r = 1.0f / a;  // torch's reciprocal kernel: IEEE division
  return r * 2688.0f;
}

float ReferenceVllmNvfp4WeightScale2(float global_scale) { return 1.0f / global_scale; }

void ReferenceVllmNvfp4Block(const float* x, float sf_scale, Reciprocal rcp, uint8_t* scale,
                             uint8_t* codes) {
  float v = 0.0f;
  for (int i = 0; i < 16; ++i) v = std::max(v, std::fabs(x[i]));
  const float s = sf_scale * (v * rcp(6.0f));
  *scale = ReferenceE4M3(s);
  const float sv = E4m3Value(*scale);
  const float o = sv != 0.0f ? rcp(sv * rcp(sf_scale)) : 0.0f;
  for (int i = 0; i < 16; ++i) {
    const float y = x[i] * o;
    codes[i] = static_cast<uint8_t>((ReferenceE2M1(std::fabs(y)) & 7) | (std::signbit(y) ? 8 : 0));
  }
}

Quantized ReferenceVllmNvfp4Quantize(const std::vector<float>& values,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<float>& global_amax, Reciprocal rcp) {
  Quantized out;
  const int64_t k = shape.back();
  const int64_t rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  int64_t experts = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) experts *= shape[d];
  out.values.assign(values.size() / 2, 0);
  out.scale_bytes.assign(values.size() / 16, 0);
  for (int64_t e = 0; e < experts; ++e) {
    const float* x = values.data() + e * rows * k;
    float amax = 0.0f;
    if (static_cast<int64_t>(global_amax.size()) > e) {
      amax = global_amax[e];
    } else {
      for (int64_t i = 0; i < rows * k; ++i) amax = std::max(amax, std::fabs(x[i]));
    }
    const float g = ReferenceVllmNvfp4GlobalScale(amax);
    out.scales.push_back(g);
    out.global_scales.push_back(ReferenceVllmNvfp4WeightScale2(g));
    for (int64_t b = 0; b < rows * k / 16; ++b) {
      uint8_t codes[16];
      ReferenceVllmNvfp4Block(x + b * 16, g, rcp, &out.scale_bytes[e * rows * k / 16 + b], codes);
      for (int i = 0; i < 8; ++i) {
        out.values[(e * rows * k + b * 16) / 2 + i] =
            static_cast<uint8_t>(codes[2 * i] | codes[2 * i + 1] << 4);
      }
    }
  }
  return out;
}

std::vector<uint8_t> ReferenceDeepgemmSm100Scales(const std::vector<float>& tile_scales,
                                                  int64_t n, int64_t k) {
  const int64_t kb = (k + 127) / 128;  // scales per row
  const int64_t n4 = RoundUp(n, 4), kb4 = RoundUp(kb, 4);
  // index_select: row r takes tile row r / 128; the exponent byte of each.
  std::vector<uint8_t> padded(n4 * kb4, 0);  // [n4, kb4] uint8
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < kb; ++c) {
      uint32_t bits;
      std::memcpy(&bits, &tile_scales[(r / 128) * kb + c], 4);
      padded[r * kb4 + c] = static_cast<uint8_t>(bits >> 23);
    }
  }
  // View as int32 [n4, kb4 / 4] (four bytes, little-endian), then store
  // transposed: int32 (r, j) at [j, r] of a [kb4 / 4, n4] matrix.
  std::vector<uint8_t> out(padded.size(), 0);
  for (int64_t r = 0; r < n4; ++r) {
    for (int64_t j = 0; j < kb4 / 4; ++j) {
      uint32_t word = 0;
      for (int b = 0; b < 4; ++b) word |= static_cast<uint32_t>(padded[r * kb4 + 4 * j + b]) << (8 * b);
      for (int b = 0; b < 4; ++b) out[(j * n4 + r) * 4 + b] = static_cast<uint8_t>(word >> (8 * b));
    }
  }
  return out;
}

}  // namespace refit::testing
