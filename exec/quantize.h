// The arithmetic of conversions (plan/conversion.h) on host memory: FP8
// e4m3 encoding, block scales, and the element-wise casts. The CUDA kernels
// (exec/cuda/convert_kernels.h) compute the same values bit for bit.
//
// Block quantization, per tile of a logical weight (128 x 128 on its last
// two dims, per expert for stacked experts; edge tiles partial):
//   amax  = max |x| over the tile, in f32
//   scale = max(amax, 1e-4f) / 448.0f          (IEEE f32 division)
//   ue8m0: scale = the smallest power of two >= scale
//   inv   = 1.0f / scale                       (IEEE f32 division)
//   q     = e4m3(clamp(x * inv, -448, 448))    (round to nearest even)
// and the engine's weight_scale_inv holds `scale`.
#ifndef REFIT_EXEC_QUANTIZE_H_
#define REFIT_EXEC_QUANTIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "plan/conversion.h"

namespace refit {

// f32 -> e4m3 (OCP "fn": bias 7, no infinities, max 448), round to nearest
// even, saturating at +-448; NaN -> 0x7F (sign kept).
uint8_t F32ToE4M3(float f);
// e4m3 -> f32 (exact).
float E4M3ToF32(uint8_t b);
// bf16 / f16 / f32 element at p -> f32 (exact).
float LoadAsF32(DType dtype, const char* p);
// The block scale of a tile with this amax.
float BlockScale(float amax, bool ue8m0);

// A contiguous row-major array of `shape` elements of `dtype` holding the
// box `box` of a tensor (global coordinates).
struct HostDenseBox {
  const char* data = nullptr;
  DType dtype = DType::kBF16;
  Box box;
};

// The amax of the part of every tile of IntersectingTiles(in.box, tile)
// that lies in in.box, row-major over that tile box. INVALID_ARGUMENT
// naming the global index of the first non-finite element.
absl::StatusOr<std::vector<float>> TileAmaxHost(const HostDenseBox& in,
                                                const std::vector<int64_t>& tile);

// Quantizes `in` into e4m3 `out` (row-major over in.box) with the scales of
// `amax` (row-major over IntersectingTiles(in.box, tile)), and writes the
// scales of OwnedTiles(in.box, tile) to `scales` (row-major; may be null
// when there are none).
void QuantizeHost(const HostDenseBox& in, const std::vector<int64_t>& tile,
                  absl::Span<const float> amax, bool ue8m0, uint8_t* out,
                  float* scales);

// f32(x) or -exp(f32(x)) for `n` elements into out; the -exp in double,
// rounded to f32 (within 1 ulp of an f32 expf).
void CastF32Host(DType dtype, const char* in, int64_t n, bool neg_exp,
                 float* out);

}  // namespace refit

#endif  // REFIT_EXEC_QUANTIZE_H_
