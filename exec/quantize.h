// The arithmetic of conversions (plan/conversion.h) on host memory: FP8
// e4m3 encoding, block scales, and the element-wise casts. The CUDA kernels
// (exec/cuda/convert_kernels.h) compute the same values bit for bit.
//
// Block quantization, per tile of a logical weight (128 x 128 on its last
// two dims, per expert for stacked experts; edge tiles partial):
//   amax  = max |x| over the tile, in f32
//   scale = max(amax, 1e-4f) / 448.0f          (IEEE f32 division)
//   kPow2: scale = the smallest power of two >= scale
//   inv   = 1.0f / scale                       (IEEE f32 division)
//   q     = e4m3(clamp(x * inv, -448, 448))    (round to nearest even)
// and the engine's weight_scale_inv holds `scale`.
//
// kPow2Requant: what vLLM holds after its DeepGEMM post-processing of the
// kFloat checkpoint (requant_weight_ue8m0_inplace, vllm/model_executor/
// layers/quantization/utils/fp8_utils.py at 364d019, calling
// per_block_cast_to_fp8 of vllm/utils/deep_gemm.py at 779d1fc): the tile is
// quantized as kFloat (scale s1, codes q1), dequantized in f32 and
// requantized with a power-of-two scale:
//   d     = f32(q1) * s1                       (IEEE f32 product)
//   amax2 = max |d| over the tile = f32(e4m3(amax * inv1)) * s1
//   s2    = the smallest power of two >= max(amax2, 1e-4f) / 448.0f
//   q     = e4m3(clamp(d * (1 / s2), -448, 448))
// and weight_scale_inv holds s2 (f32, row-major [ceil(N/128), ceil(K/128)]:
// on SM90 DeepGEMM's transform_sf_into_required_layout keeps FP32 128x128
// weight scales as they are, deepseek-ai/DeepGEMM csrc/apis/layout.hpp at
// 2f98946). amax2 follows from amax alone because rounding to e4m3 is
// monotone, so cut tiles need no more than their amax exchange.
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
// How a tile's scale (and, for kPow2Requant, its codes) follow from amax.
enum class ScaleMode : int32_t { kFloat = 0, kPow2 = 1, kPow2Requant = 2 };
// kFp8Block -> kFloat, kFp8BlockUe8m0 -> kPow2, kFp8BlockRequantUe8m0 ->
// kPow2Requant (kFloat for the element-wise kinds).
ScaleMode ScaleModeOf(ConversionKind k);

// The block scale written for a tile with this amax (s2 for kPow2Requant).
float BlockScale(float amax, ScaleMode mode);

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
                  absl::Span<const float> amax, ScaleMode mode, uint8_t* out,
                  float* scales);

// f32(x) or -exp(f32(x)) for `n` elements into out; the -exp in double,
// rounded to f32 (within 1 ulp of an f32 expf).
void CastF32Host(DType dtype, const char* in, int64_t n, bool neg_exp,
                 float* out);

}  // namespace refit

#endif  // REFIT_EXEC_QUANTIZE_H_
