#include "exec/convert/nvfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "plan/conversion.h"

namespace refit {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

float Nvfp4GlobalScale(float amax) {
  // torch on CUDA divides by a Python scalar as a product with its f32
  // reciprocal; f32(1 / 2688) is exact here as a constant.
  return amax * (1.0f / 2688.0f);
}

uint8_t Nvfp4ScaleByte(float block_amax, float global_scale) {
  const float d = 6.0f * global_scale;
  float s = block_amax / d;
  if (s == 0.0f) s = 1.0f;
  s = std::fmax(s, 0.001953125f);  // 2^-9, e4m3's smallest subnormal
  return F32ToE4M3(s);
}

uint8_t F32ToE2M1(float y) {
  // Round to nearest even onto the E2M1 grid by the bits: below 1 the
  // step is 0.5 (rint of 2|y|: 0, 1 or 2 = the codes of 0, 0.5 and 1.0);
  // from 1 up, one mantissa bit kept (RNE on bit 22), the code being
  // (biased exponent << 1 | mantissa bit) - 252, at most 7 (6.0). Equal to
  // _cast_fp4's bounds (exec/convert/nvfp4_test.cc checks every float near them).
  const uint8_t sign = y < 0.0f ? 8 : 0;
  const float a = std::fabs(y);
  if (a < 1.0f) return sign | static_cast<uint8_t>(std::nearbyint(a * 2.0f));
  uint32_t u;
  std::memcpy(&u, &a, 4);
  u = (u + 0x1FFFFFu + ((u >> 22) & 1u)) & 0xFFC00000u;
  const uint32_t c = (u >> 22) - 252u;
  return sign | static_cast<uint8_t>(c < 7u ? c : 7u);
}

float E2M1ToF32(uint8_t code) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[code & 7];
  return (code & 8) ? -v : v;
}

void QuantizeNvfp4Host(const HostDenseBox& in, absl::Span<const float> block_amax,
                       absl::Span<const float> global_scale, uint8_t* out,
                       uint8_t* scales) {
  const int rank = in.box.rank();
  const int64_t R = in.box.shape(rank - 2), C = in.box.shape(rank - 1);
  const int64_t c0 = in.box.origin(rank - 1);
  int64_t L = 1;
  for (int d = 0; d + 2 < rank; ++d) L *= in.box.shape(d);
  const int64_t first_tile = c0 / kNvfp4Block;
  const int64_t tiles = IsEmpty(in.box) ? 0 : CeilDiv(c0 + C, kNvfp4Block) - first_tile;
  const int64_t owned0 = CeilDiv(c0, kNvfp4Block);
  const int64_t owned = std::max<int64_t>(0, CeilDiv(c0 + C, kNvfp4Block) - owned0);
  const int64_t es = DTypeSize(in.dtype);
  std::vector<uint8_t> bytes(tiles);
  std::vector<float> divisor(tiles);
  for (int64_t l = 0; l < L; ++l) {
    const float g = global_scale[l];
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row = l * R + r;
      for (int64_t t = 0; t < tiles; ++t) {
        bytes[t] = Nvfp4ScaleByte(block_amax[row * tiles + t], g);
        divisor[t] = E4M3ToF32(bytes[t]) * g;
      }
      const char* x = in.data + row * C * es;
      uint8_t* o = out + row * (C / 2);
      for (int64_t i = 0; i < C; i += 2) {
        const int64_t t0 = (c0 + i) / kNvfp4Block - first_tile;
        const int64_t t1 = (c0 + i + 1) / kNvfp4Block - first_tile;
        const uint8_t lo = F32ToE2M1(LoadAsF32(in.dtype, x + i * es) / divisor[t0]);
        const uint8_t hi = F32ToE2M1(LoadAsF32(in.dtype, x + (i + 1) * es) / divisor[t1]);
        o[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
      if (scales != nullptr) {
        for (int64_t j = 0; j < owned; ++j) {
          scales[row * owned + j] = bytes[owned0 + j - first_tile];
        }
      }
    }
  }
}

}  // namespace refit
