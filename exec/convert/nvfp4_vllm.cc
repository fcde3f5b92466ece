#include "exec/convert/nvfp4_vllm.h"

#include <algorithm>

#include "exec/convert/nvfp4_vllm_math.h"
#include "exec/convert/quantize.h"
#include "plan/conversion.h"

namespace refit {
float Nvfp4VllmGlobalScale(float amax) { return Nvfp4VllmGlobal(amax); }

void QuantizeNvfp4VllmHost(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                           uint8_t* scales, absl::FunctionRef<float(float)> rcp) {
  const float rcp6 = rcp(6.0f), rcp_g = rcp(g);
  for (int64_t b = 0; b < blocks; ++b) {
    float x[16], v = 0.0f;
    for (int i = 0; i < 16; ++i) {
      x[i] = LoadAsF32(DType::kBF16, reinterpret_cast<const char*>(in + b * 16 + i));
      v = std::max(v, Nvfp4Abs(x[i]));
    }
    const uint8_t sb = F32ToE4M3(Nvfp4VllmBlockScale(v, g, rcp6));
    const float sv = E4M3ToF32(sb);
    const float o = sv != 0.0f ? rcp(Nvfp4VllmOutputDivisor(sv, rcp_g)) : 0.0f;
    scales[b] = sb;
    for (int i = 0; i < 8; ++i) {
      codes[b * 8 + i] = static_cast<uint8_t>(Nvfp4VllmCode(x[2 * i], o) |
                                              Nvfp4VllmCode(x[2 * i + 1], o) << 4);
    }
  }
}

void QuantizeNvfp4VllmHost(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                           uint8_t* scales) {
  QuantizeNvfp4VllmHost(in, blocks, g, codes, scales, [](float x) { return Nvfp4VllmRcp(x); });
}

float Nvfp4VllmWeightScale2Of(float g) { return Nvfp4VllmWeightScale2(g); }

void QuantizeNvfp4VllmBoxHost(const HostDenseBox& in, absl::Span<const float> block_amax,
                              absl::Span<const float> sf_scale, uint8_t* out, uint8_t* scales) {
  const int rank = in.box.rank();
  const int64_t R = in.box.shape(rank - 2), C = in.box.shape(rank - 1);
  const int64_t c0 = in.box.origin(rank - 1);
  int64_t L = 1;
  for (int d = 0; d + 2 < rank; ++d) L *= in.box.shape(d);
  const int64_t first = c0 / kNvfp4Block;
  const int64_t tiles = C == 0 ? 0 : (c0 + C + kNvfp4Block - 1) / kNvfp4Block - first;
  const int64_t owned0 = (c0 + kNvfp4Block - 1) / kNvfp4Block;
  const int64_t es = DTypeSize(in.dtype);
  const float rcp6 = Nvfp4VllmRcp(6.0f);
  for (int64_t l = 0; l < L; ++l) {
    const float g = sf_scale[l], rcp_g = Nvfp4VllmRcp(g);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row = l * R + r;
      const char* x = in.data + row * C * es;
      for (int64_t t = 0; t < tiles; ++t) {
        // The tile's columns inside the box, relative to the box.
        const int64_t b0 = std::max<int64_t>(0, (first + t) * kNvfp4Block - c0);
        const int64_t b1 = std::min<int64_t>(C, (first + t + 1) * kNvfp4Block - c0);
        float v = 0.0f;
        if (block_amax.empty()) {
          for (int64_t i = b0; i < b1; ++i) v = std::max(v, Nvfp4Abs(LoadAsF32(in.dtype, x + i * es)));
        } else {
          v = block_amax[row * tiles + t];
        }
        const uint8_t sb = F32ToE4M3(Nvfp4VllmBlockScale(v, g, rcp6));
        const float sv = E4M3ToF32(sb);
        const float o = sv != 0.0f ? Nvfp4VllmRcp(Nvfp4VllmOutputDivisor(sv, rcp_g)) : 0.0f;
        for (int64_t i = b0; i < b1; i += 2) {
          out[row * (C / 2) + i / 2] = static_cast<uint8_t>(
              Nvfp4VllmCode(LoadAsF32(in.dtype, x + i * es), o) |
              Nvfp4VllmCode(LoadAsF32(in.dtype, x + (i + 1) * es), o) << 4);
        }
        const int64_t owned_tiles = std::max<int64_t>(0, first + tiles - owned0);
        if (scales != nullptr && first + t >= owned0) {
          scales[row * owned_tiles + (first + t - owned0)] = sb;
        }
      }
    }
  }
}

}  // namespace refit
