// References for two engine recipes read from upstream, written plainly
// (element by element, codes found by search) to check refit's own
// arithmetic and layouts against:
//
// - vLLM's online NVFP4 (`--quantization nvfp4_per_token`: experts only,
//   Nvfp4OnlineMoEMethod and _quantize_moe_weight_to_nvfp4 in
//   vllm/model_executor/layers/quantization/online/nvfp4.py at 0136201),
//   whose block quantizer is FlashInfer's fp4_quantize (backend "cuda":
//   cvt_warp_fp16_to_fp4 in flashinfer csrc/nv_internal/tensorrt_llm/
//   kernels/quantization_utils.cuh at 014327a; vLLM's own scaled_fp4_quant,
//   csrc/quantization/fp4/nvfp4_utils.cuh at 07c13c7, computes the same).
// - DeepGEMM's SM100 weight scales: UE8M0 exponents per row, packed four
//   to an int32, MN-major (get_mn_major_tma_aligned_packed_ue8m0_tensor,
//   as vLLM and SGLang call it through transform_sf_into_required_layout;
//   read in sgl-project/sglang python/sglang/srt/layers/quantization/
//   fp8_utils.py transform_scale_ue8m0 and its copy of DeepGEMM's torch
//   statement).
#ifndef REFIT_TESTING_REFERENCE_NVFP4_VLLM_H_
#define REFIT_TESTING_REFERENCE_NVFP4_VLLM_H_

#include <cstdint>
#include <vector>

#include "testing/reference_quantizer.h"

namespace refit::testing {

// An f32 reciprocal as the quantizer's rcp.approx.ftz.f32 computes it.
using Reciprocal = float (*)(float);

// The model of rcp.approx.ftz.f32 used where no GPU answers: the correctly
// rounded 1 / x, with a subnormal input read as zero (giving infinity of
// its sign) and a subnormal result flushed to zero. PTX promises only a
// 1-ulp bound for the instruction, so the model can differ from a GPU in
// the last bit (gpu_check/rcp_approx_check.py measures where).
float RcpModel(float x);

// vLLM's per-expert global scale, the quantizer's SFScale: torch computes
// (6.0 * 448.0) / amax on a float32 tensor as amax.reciprocal() * 2688.0
// (Tensor.__rtruediv__ in torch/_tensor.py), so g = RN(RN(1 / a) * 2688)
// with a = max(amax, f32(1e-8)) (clamp_min).
float ReferenceVllmNvfp4GlobalScale(float amax);

// weight_scale_2 as vLLM keeps it: 1.0 / global_scale, again the f32
// reciprocal: RN(1 / g).
float ReferenceVllmNvfp4WeightScale2(float global_scale);

// One 16-block as cvt_warp_fp16_to_fp4 quantizes it, with `sf_scale` the
// global scale g and `x` the block's 16 BF16/F16 values as f32:
//   v   = max |x|
//   s   = g * (v * rcp(6))            e4m3 by RN, saturating at 448
//   o   = s != 0 ? rcp(f32(s) * rcp(g)) : 0
//   q_i = E2M1(x_i * o)               RN, saturating at 6; the sign bit of
//                                     the product (so -0.0 is code 8)
// Sets *scale to s's e4m3 byte and codes[0..15] to the 4-bit codes.
void ReferenceVllmNvfp4Block(const float* x, float sf_scale, Reciprocal rcp, uint8_t* scale,
                             uint8_t* codes);

// Quantizes experts [E, N, K] (K a multiple of 16; a 2-dim tensor is one
// expert) as _quantize_moe_weight_to_nvfp4 does: per expert amax =
// global_amax[e] when given (vLLM takes the max over the expert's TP
// shards, amax_for_moe_weight_quant), else max |x| over the expert; g =
// ReferenceVllmNvfp4GlobalScale(amax); every 16-block by
// ReferenceVllmNvfp4Block. values: packed bytes [..., K / 2] (even element
// low); scale_bytes [..., K / 16]; global_scales: weight_scale_2 per
// expert (what vLLM keeps); scales: g per expert.
Quantized ReferenceVllmNvfp4Quantize(const std::vector<float>& values,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<float>& global_amax = {},
                                     Reciprocal rcp = RcpModel);

// The bytes of DeepGEMM's SM100 weight scale tensor for an [n, k] weight
// whose 128 x 128 tile scales `tile_scales` ([ceil(n/128), ceil(k/128)]
// row-major f32 powers of two) are given: each row takes its tile row's
// scales (index_select by row // 128), each scale becomes its exponent
// byte (f32 bits >> 23), rows are padded to a multiple of 4 and the
// ceil(k/128) exponents of a row to a multiple of 4 with zeros, four
// consecutive exponents make one little-endian int32, and the int32
// matrix [align(n, 4), ceil(k/512)] is stored MN-major (transposed:
// [ceil(k/512), align(n, 4)] row-major). Returns those 4 * ceil(k/512) *
// align(n, 4) bytes.
std::vector<uint8_t> ReferenceDeepgemmSm100Scales(const std::vector<float>& tile_scales,
                                                  int64_t n, int64_t k);

}  // namespace refit::testing

#endif  // REFIT_TESTING_REFERENCE_NVFP4_VLLM_H_
