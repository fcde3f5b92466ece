// vLLM's online NVFP4 recipe on host memory (exec/convert/nvfp4_vllm_math.h has
// the formulas and their upstream sources): the global scale, the
// weight_scale_2 vLLM keeps, and BF16 16-blocks into e4m3 block scales and
// packed E2M1 codes as FlashInfer's cvt_warp_fp16_to_fp4 makes them. The
// CUDA kernels (exec/convert/cuda/nvfp4_vllm_kernels.h) compute the same bytes with
// the GPU's rcp.approx.ftz.f32 where this takes `rcp`.
#ifndef REFIT_EXEC_CONVERT_NVFP4_VLLM_H_
#define REFIT_EXEC_CONVERT_NVFP4_VLLM_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "exec/convert/quantize.h"

namespace refit {

// The quantizer's SFScale g for an expert's amax: RN(RN(1 / max(amax,
// 1e-8)) * 2688), torch's evaluation of (6.0 * 448.0) / amax.
float Nvfp4VllmGlobalScale(float amax);

// Quantizes `blocks` 16-blocks of BF16 bits `in` (contiguous) with global
// scale g: the block's e4m3 byte to scales[b], its 16 codes packed two a
// byte (even element low) to codes[8 * b ...]. `rcp` stands for
// rcp.approx.ftz.f32; Nvfp4VllmRcp (the host model) unless a caller has
// the device's values.
void QuantizeNvfp4VllmHost(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                           uint8_t* scales, absl::FunctionRef<float(float)> rcp);
void QuantizeNvfp4VllmHost(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                           uint8_t* scales);

// The f32 weight_scale_2 vLLM keeps for SFScale g: RN(1 / g).
float Nvfp4VllmWeightScale2Of(float g);

// QuantizeNvfp4Host's contract with vLLM's recipe: `in` (last dim even,
// starting at an even column) into packed codes `out` (row-major over
// in.box, last extent halved), the e4m3 bytes of the blocks of
// OwnedTiles(in.box, 1 x 16) into `scales` (may be null), with SFScale
// sf_scale[l] (Nvfp4VllmGlobalScale of the parameter's amax) per index l
// of the box's leading dims; `block_amax` (row-major over
// IntersectingTiles(in.box, 1 x 16)) holds the amax of every whole block
// of a tile the box cuts (exchanged with its other holders), empty when
// every tile is whole in the box (each block's own max is taken).
void QuantizeNvfp4VllmBoxHost(const HostDenseBox& in, absl::Span<const float> block_amax,
                              absl::Span<const float> sf_scale, uint8_t* out, uint8_t* scales);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_NVFP4_VLLM_H_
