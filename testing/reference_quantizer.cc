#include "testing/reference_quantizer.h"

#include <algorithm>
#include <cmath>

namespace refit::testing {
namespace {

float CodeValue(int c) {
  const int e = (c >> 3) & 0xF, m = c & 7;
  const float v = e == 0 ? m * std::pow(2.0f, -9.0f)
                         : (1.0f + m / 8.0f) * std::pow(2.0f, static_cast<float>(e - 7));
  return (c & 0x80) ? -v : v;
}

}  // namespace

uint8_t ReferenceE4M3(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  x = std::min(448.0f, std::max(-448.0f, x));
  int best = 0;
  double best_d = 1e30;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN codes
    if (c == 0x80) continue;           // -0: take +0 unless x is negative
    const double d = std::fabs(static_cast<double>(CodeValue(c)) - x);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  if (best == 0 && std::signbit(x)) best = 0x80;
  return static_cast<uint8_t>(best);
}

Quantized ReferenceQuantize(const std::vector<float>& values,
                            const std::vector<int64_t>& shape, int64_t block,
                            bool ue8m0) {
  const size_t rank = shape.size();
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  int64_t lead = 1;
  for (size_t d = 0; d + 2 < rank; ++d) lead *= shape[d];
  const int64_t tr = (rows + block - 1) / block, tc = (cols + block - 1) / block;
  Quantized q;
  q.values.resize(values.size());
  q.scales.resize(lead * tr * tc);
  for (int64_t l = 0; l < lead; ++l) {
    for (int64_t i = 0; i < tr; ++i) {
      for (int64_t j = 0; j < tc; ++j) {
        float amax = 0;
        for (int64_t r = i * block; r < std::min(rows, (i + 1) * block); ++r) {
          for (int64_t c = j * block; c < std::min(cols, (j + 1) * block); ++c) {
            amax = std::max(amax, std::fabs(values[(l * rows + r) * cols + c]));
          }
        }
        float scale = std::max(amax, 1e-4f) / 448.0f;
        if (ue8m0) {
          float p = 1.0f;
          while (p < scale) p *= 2.0f;
          while (p / 2.0f >= scale) p /= 2.0f;
          scale = p;
        }
        const float inv = 1.0f / scale;
        q.scales[(l * tr + i) * tc + j] = scale;
        for (int64_t r = i * block; r < std::min(rows, (i + 1) * block); ++r) {
          for (int64_t c = j * block; c < std::min(cols, (j + 1) * block); ++c) {
            const int64_t k = (l * rows + r) * cols + c;
            q.values[k] = ReferenceE4M3(values[k] * inv);
          }
        }
      }
    }
  }
  return q;
}

}  // namespace refit::testing
