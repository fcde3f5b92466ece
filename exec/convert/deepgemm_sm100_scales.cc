// DeepGEMM's SM100 packed UE8M0 scales on the host (deepgemm_sm100_scales.h).
#include "exec/convert/deepgemm_sm100_scales.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace refit {

DeepgemmSm100ScaleShape DeepgemmSm100Scales(int64_t n, int64_t k) {
  const int64_t sf_k = (k + 127) / 128;
  return {(sf_k + 3) / 4, (n + 3) / 4 * 4};
}

absl::Status PackDeepgemmSm100Scales(absl::Span<const float> tile_scales, int64_t experts,
                                     int64_t n, int64_t k, absl::Span<uint8_t> out,
                                     const std::string& tensor) {
  if (experts < 1 || n < 1 || k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor, ": DeepGEMM SM100 scales of ",
                                                   experts, " x [", n, ", ", k, "]"));
  }
  const int64_t tile_rows = (n + 127) / 128, sf_k = (k + 127) / 128;
  const DeepgemmSm100ScaleShape s = DeepgemmSm100Scales(n, k);
  if (static_cast<int64_t>(tile_scales.size()) != experts * tile_rows * sf_k ||
      static_cast<int64_t>(out.size()) != experts * s.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, ": ", tile_scales.size(), " tile scales and ", out.size(),
        " output bytes for DeepGEMM SM100 scales of ", experts, " x [", n, ", ", k, "] (want ",
        experts * tile_rows * sf_k, " and ", experts * s.bytes(), ")"));
  }
  // The exponent bytes, checked: a power of two has no mantissa bits.
  std::vector<uint8_t> ue8m0(tile_scales.size());
  for (size_t i = 0; i < tile_scales.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &tile_scales[i], 4);
    const uint32_t exponent = (bits >> 23) & 0xFF;
    if ((bits & 0x807FFFFFu) != 0 || exponent == 0 || exponent == 0xFF) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", tensor, ": tile scale ", tile_scales[i], " (tile ", i,
          ") is not a positive power of two; DeepGEMM's SM100 UE8M0 scales hold exponents only"));
    }
    ue8m0[i] = static_cast<uint8_t>(exponent);
  }
  std::memset(out.data(), 0, out.size());
  for (int64_t e = 0; e < experts; ++e) {
    const uint8_t* tiles = ue8m0.data() + e * tile_rows * sf_k;
    uint8_t* dst = out.data() + e * s.bytes();
    for (int64_t r = 0; r < n; ++r) {
      // int32 (r, j) at [j, r]: its byte b is exponent 4j + b of row r.
      for (int64_t c = 0; c < sf_k; ++c) {
        dst[((c / 4) * s.aligned_n + r) * 4 + c % 4] = tiles[(r / 128) * sf_k + c];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
