// The arithmetic of conversions (plan/conversion.h) on host memory: FP8
// e4m3 encoding, block scales, and the element-wise casts. The CUDA kernels
// (exec/convert/cuda/convert_kernels.h) compute the same values bit for bit.
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
//
// kE8m0 (MXFP8, blocks of 1 x 32 along K, QuantFormat::kMxfp8): vLLM's
// _mxfp8_e4m3_quantize_torch (vllm/model_executor/layers/quantization/
// utils/mxfp8_utils.py, the version computing ceil(log2(amax / 448)); the
// online method Mxfp8OnlineLinearMethod / Mxfp8OnlineMoEMethod of
// quantization/mxfp8.py at 2aa8028 quantizes every BF16 weight with it):
//   a     = max(amax, 2^-126)                  (torch.finfo(f32).tiny)
//   e     = clamp(ceil(log2(a / 448.0f)) + 127, 0, 254)   (a / 448 in f32)
//   q     = e4m3(x / 2^(e - 127))              (round to nearest even)
// and the engine's weight_scale holds the byte e (uint8, E8M0). Here
// ceil(log2(.)) is exact (frexp); torch's log2f agrees for every bf16 and
// f16 weight (a / 448 is never within 2^-10 of a power of two above it
// unless equal to it); for an f32 weight whose a / 448 lies within a few
// ulps above a power of two torch may round the logarithm down.
#ifndef REFIT_EXEC_CONVERT_QUANTIZE_H_
#define REFIT_EXEC_CONVERT_QUANTIZE_H_

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
// kPow2RequantE8m0: kPow2Requant's codes and scales, each scale written as
// its exponent byte (the f32 bits >> 23: DeepGEMM's UE8M0 on SM100,
// exec/convert/deepgemm_sm100_scales.h).
enum class ScaleMode : int32_t {
  kFloat = 0,
  kPow2 = 1,
  kPow2Requant = 2,
  kE8m0 = 3,
  kPow2RequantE8m0 = 4,
};
// The scale mode of a format row (layout/quant_format.h): kFp8Block ->
// kFloat, kFp8BlockUe8m0 -> kPow2, kFp8BlockRequantUe8m0 -> kPow2Requant
// (kPow2RequantE8m0 with kPackedUe8m0 scales), kMxfp8 -> kE8m0; kFloat for
// the others (NVFP4 has its own arithmetic, exec/convert/nvfp4.h).
ScaleMode ScaleModeOf(QuantFormat f, ScaleSwizzle s);

// The block scale a tile with this amax is quantized with (s2 for
// kPow2Requant; 2^(e - 127) for kE8m0).
float BlockScale(float amax, ScaleMode mode);

// kE8m0: the biased exponent byte e written for a block with this amax.
uint8_t E8m0ScaleByte(float amax);

// Bytes of one scale element of `mode` (4, f32; 1 for kE8m0 and
// kPow2RequantE8m0).
int64_t ScaleElementSize(ScaleMode mode);

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

// Quantizes `in` into e4m3 `out` (row-major over in.box; null: only the
// scales) with the scales of
// `amax` (row-major over IntersectingTiles(in.box, tile)), and writes the
// scales of OwnedTiles(in.box, tile) to `scales` (row-major, f32, or bytes
// for kE8m0 and kPow2RequantE8m0; may be null when there are none).
void QuantizeHost(const HostDenseBox& in, const std::vector<int64_t>& tile,
                  absl::Span<const float> amax, ScaleMode mode, uint8_t* out,
                  void* scales);

// f32(x) or -exp(f32(x)) for `n` elements into out; the -exp in double,
// rounded to f32 (within 1 ulp of an f32 expf).
void CastF32Host(DType dtype, const char* in, int64_t n, bool neg_exp,
                 float* out);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_QUANTIZE_H_
