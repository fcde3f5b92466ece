#include "testing/reference_quantizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  // The non-negative codes 0x00..0x7E in increasing value; search the
  // magnitude, nearest value, ties to the even code.
  static const std::vector<float>* values = [] {
    auto* v = new std::vector<float>();
    for (int c = 0; c < 0x7F; ++c) v->push_back(CodeValue(c));
    return v;
  }();
  const float a = std::fabs(x);
  int hi = static_cast<int>(std::lower_bound(values->begin(), values->end(), a) -
                            values->begin());
  int best;
  if (hi == 0) {
    best = 0;
  } else if (hi == static_cast<int>(values->size())) {
    best = hi - 1;
  } else {
    const double dl = static_cast<double>(a) - (*values)[hi - 1];
    const double dh = static_cast<double>((*values)[hi]) - a;
    best = dl < dh ? hi - 1 : dh < dl ? hi : ((hi - 1) % 2 == 0 ? hi - 1 : hi);
  }
  if (std::signbit(x)) best |= 0x80;
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

namespace {

// e4m3 (OCP fn: bias 7, 3 mantissa bits, no infinities) by its fields.
float DecodeE4M3(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 0x7;
  const double v = exp == 0 ? std::ldexp(man / 8.0, -6)
                            : std::ldexp(1.0 + man / 8.0, exp - 7);
  return static_cast<float>(sign ? -v : v);
}

}  // namespace

Quantized ReferenceRequantUe8m0(const Quantized& checkpoint,
                                const std::vector<int64_t>& shape, int64_t block) {
  const size_t rank = shape.size();
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  int64_t lead = 1;
  for (size_t d = 0; d + 2 < rank; ++d) lead *= shape[d];
  const int64_t tr = (rows + block - 1) / block, tc = (cols + block - 1) / block;
  Quantized q;
  q.values.resize(checkpoint.values.size());
  q.scales.resize(checkpoint.scales.size());
  std::vector<float> d(checkpoint.values.size());
  for (int64_t l = 0; l < lead; ++l) {
    for (int64_t i = 0; i < tr; ++i) {
      for (int64_t j = 0; j < tc; ++j) {
        const float s_old = checkpoint.scales[(l * tr + i) * tc + j];
        float amax = 0;
        for (int64_t r = i * block; r < std::min(rows, (i + 1) * block); ++r) {
          for (int64_t c = j * block; c < std::min(cols, (j + 1) * block); ++c) {
            const int64_t k = (l * rows + r) * cols + c;
            d[k] = DecodeE4M3(checkpoint.values[k]) * s_old;
            amax = std::max(amax, std::fabs(d[k]));
          }
        }
        const float sf = std::max(amax, 1e-4f) / 448.0f;
        const float s_new =
            static_cast<float>(std::pow(2.0, std::ceil(std::log2(static_cast<double>(sf)))));
        q.scales[(l * tr + i) * tc + j] = s_new;
        for (int64_t r = i * block; r < std::min(rows, (i + 1) * block); ++r) {
          for (int64_t c = j * block; c < std::min(cols, (j + 1) * block); ++c) {
            const int64_t k = (l * rows + r) * cols + c;
            q.values[k] = ReferenceE4M3(d[k] * (1.0f / s_new));
          }
        }
      }
    }
  }
  return q;
}

Quantized ReferenceMxfp8Quantize(const std::vector<float>& values,
                                 const std::vector<int64_t>& shape) {
  const int64_t cols = shape.back();
  const int64_t rows = static_cast<int64_t>(values.size()) / std::max<int64_t>(cols, 1);
  Quantized q;
  q.values.resize(values.size());
  q.scale_bytes.resize(rows * (cols / 32));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols / 32; ++j) {
      const float* x = values.data() + r * cols + j * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float tiny = std::ldexp(1.0f, -126);
      const float ratio = std::max(amax, tiny) / 448.0f;
      // The smallest k with 2^k >= ratio: ceil(log2(ratio)).
      int k = -160;
      while (std::ldexp(1.0, k) < static_cast<double>(ratio)) ++k;
      const int e = std::min(254, std::max(0, k + 127));
      q.scale_bytes[r * (cols / 32) + j] = static_cast<uint8_t>(e);
      const float descale = std::ldexp(1.0f, e - 127);
      for (int i = 0; i < 32; ++i) {
        q.values[r * cols + j * 32 + i] = ReferenceE4M3(x[i] / descale);
      }
    }
  }
  return q;
}

uint8_t ReferenceE2M1(float y) {
  static const float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const double a = std::min(6.0, std::fabs(static_cast<double>(y)));
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double dc = std::fabs(a - kMagnitudes[c]), db = std::fabs(a - kMagnitudes[best]);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>((y < 0.0f ? 8 : 0) | best);
}

Quantized ReferenceNvfp4Quantize(const std::vector<float>& values,
                                 const std::vector<int64_t>& shape,
                                 const std::vector<float>& global_amax) {
  const size_t rank = shape.size();
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  const int64_t lead = static_cast<int64_t>(values.size()) / std::max<int64_t>(rows * cols, 1);
  Quantized q;
  q.values.assign(values.size() / 2, 0);
  q.scale_bytes.resize(lead * rows * (cols / 16));
  for (int64_t l = 0; l < lead; ++l) {
    const float* slice = values.data() + l * rows * cols;
    float amax = 0;
    if (!global_amax.empty()) {
      amax = global_amax[l];
    } else {
      for (int64_t k = 0; k < rows * cols; ++k) amax = std::max(amax, std::fabs(slice[k]));
    }
    // torch's CUDA division by the Python scalar 6 * 448: a product with
    // its f32 reciprocal.
    const float g = amax * (1.0f / 2688.0f);
    q.global_scales.push_back(g);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols / 16; ++j) {
        const float* x = slice + r * cols + j * 16;
        float bamax = 0;
        for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(x[i]));
        float s = bamax / (6.0f * g);
        if (s == 0.0f) s = 1.0f;
        s = std::max(s, std::ldexp(1.0f, -9));
        const uint8_t sb = ReferenceE4M3(s);
        q.scale_bytes[(l * rows + r) * (cols / 16) + j] = sb;
        const float d = DecodeE4M3(sb) * g;
        for (int i = 0; i < 16; ++i) {
          const int64_t k = (l * rows + r) * cols + j * 16 + i;
          const uint8_t code = ReferenceE2M1(x[i] / d);
          q.values[k / 2] |= static_cast<uint8_t>(k % 2 == 0 ? code : code << 4);
        }
      }
    }
  }
  return q;
}

}  // namespace refit::testing
