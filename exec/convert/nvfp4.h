// NVFP4 arithmetic on host memory (QuantFormat::kNvfp4): E2M1 codes two
// per byte, one e4m3 scale per 1 x 16 block along the last dim, and one f32
// global scale per logical weight (per expert for stacked experts; one over
// the fused parts of qkv_proj / gate_up_proj / w13). The CUDA kernels
// (exec/convert/cuda/nvfp4_kernels.h, exec/pull/cuda/pull_nvfp4_kernels.h) compute the
// same bytes, dividing by a reciprocal (exec/convert/nvfp4_math.h).
//
// vLLM does not quantize NVFP4 weights itself: it loads ModelOpt's export
// (ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE, vllm/model_executor/
// layers/quantization/modelopt.py at 00155cd) and keeps its bytes. The
// formulas are ModelOpt's NVFP4QTensor (modelopt/torch/quantization/qtensor/
// nvfp4_tensor.py, NVIDIA/Model-Optimizer at 211c6b3: quantize,
// get_weights_scaling_factor, get_weights_scaling_factor_2, _cast_fp4), all
// in f32:
//   amax  = max |x| over the logical weight (its fused group, per expert)
//   g     = amax * f32(1 / 2688)     weight_scale_2: ModelOpt writes
//           amax / (6.0 * 448.0), and torch on CUDA (where ModelOpt
//           calibrates and exports) divides a tensor by a Python scalar as
//           a product with the scalar's f32 reciprocal (ATen's
//           div_true_kernel_cuda); an H200 run of gpu_check/
//           nvfp4_torch_check.py showed the true quotient one ulp off
//           for 1 of 3 experts
//   s     = block_amax / (6.0f * g)  (6 * g rounded to f32 first)
//   s     = 1.0f where s == 0 (all-zero block), then max(s, 2^-9)
//   S     = e4m3(s)                  weight_scale (RNE; s never exceeds 448
//                                    by more than f32 rounding)
//   y     = x / (f32(S) * g)         (the product rounded to f32 first)
//   code  = E2M1(y): |y| onto {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even
//           code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
//           3.5 -> 4, 5 -> 4), above 6 -> 6; sign bit 8 when y < 0 (so
//           -0.0 is code 0 and a negative value rounding to 0 is code 8),
//           as _cast_fp4's searchsorted over [.25, .75, 1.25, 1.75, 2.5,
//           3.5, 5] with the odd bounds rounded up
//   byte  = code[2j] | code[2j + 1] << 4   (even element in the low nibble,
//           ModelOpt's pack, vLLM's ModelOptNvFp4EmbeddingMethod unpack)
// An all-zero logical weight (amax 0, g 0) has no defined scale (ModelOpt
// divides by g): Converter refuses it by name.
//
// What vLLM keeps after loading (modelopt.py at 00155cd): dense layers
// rename weight_scale_2 (one per fused part in the checkpoint, equal when
// ModelOpt shares the amax) to the 0-dim f32 `weight_global_scale` = their
// max, and derive `alpha = input_global_scale * weight_global_scale` and
// `input_global_scale_inv` from the calibrated activation scale; MoE keeps
// `w13_weight_scale_2` [E] (the gate part's) and `w2_weight_scale_2` [E],
// and its kernels take g1_alphas = w13_input_scale * w13_weight_scale_2.
// refit writes the weights, block scales and global scales; the alphas are
// products with the engine's own activation scales, recomputed on the
// engine after each commit (client/python/refit/engine_layouts.py).
#ifndef REFIT_EXEC_CONVERT_NVFP4_H_
#define REFIT_EXEC_CONVERT_NVFP4_H_

#include <cstdint>

#include "absl/types/span.h"
#include "exec/convert/quantize.h"

namespace refit {

// amax * f32(1 / 2688): weight_scale_2 (vLLM's weight_global_scale).
float Nvfp4GlobalScale(float amax);

// The e4m3 byte of a 16-block's scale, from its amax and the global scale.
uint8_t Nvfp4ScaleByte(float block_amax, float global_scale);

// E2M1 code (4 bits) of y as _cast_fp4 rounds it.
uint8_t F32ToE2M1(float y);
// The value of a code (low 4 bits of `code`).
float E2M1ToF32(uint8_t code);

// Quantizes `in` (last dim even, starting at an even column) into packed
// codes `out` (row-major over in.box with the last extent halved) with the
// block amaxes `block_amax` (row-major over IntersectingTiles(in.box, 1 x
// 16 tiles)) and the global scales `global_scale` (one per index of the
// box's leading dims, row-major; one in all for a 2-dim box); the e4m3
// bytes of the blocks of OwnedTiles(in.box) go to `scales` (may be null).
void QuantizeNvfp4Host(const HostDenseBox& in, absl::Span<const float> block_amax,
                       absl::Span<const float> global_scale, uint8_t* out,
                       uint8_t* scales);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_NVFP4_H_
