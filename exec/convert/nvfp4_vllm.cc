#include "exec/convert/nvfp4_vllm.h"

#include <algorithm>

#include "exec/convert/nvfp4_vllm_math.h"
#include "exec/convert/quantize.h"

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

}  // namespace refit
