// vLLM's online NVFP4 recipe, per element and per 16-block, written once
// for the host and the CUDA kernels (exec/convert/cuda/nvfp4_vllm_kernels.cu).
//
// vLLM quantizes a BF16 expert itself (Nvfp4OnlineMoEMethod,
// _quantize_moe_weight_to_nvfp4 in vllm/model_executor/layers/
// quantization/online/nvfp4.py at 0136201):
//   a   = max(amax over the expert, f32(1e-8))
//   g   = (6.0 * 448.0) / a              torch on a float32 tensor:
//                                        a.reciprocal() * 2688 (Tensor.
//                                        __rtruediv__), RN(RN(1 / a) * 2688)
//   weight_scale_2 = 1.0 / g             RN(1 / g) the same way
// and hands g to FlashInfer's fp4_quantize as SFScale, whose
// cvt_warp_fp16_to_fp4 (flashinfer csrc/nv_internal/tensorrt_llm/kernels/
// quantization_utils.cuh at 014327a; vLLM's scaled_fp4_quant,
// csrc/quantization/fp4/nvfp4_utils.cuh at 07c13c7, is the same) does per
// 16-block, with rcp the PTX rcp.approx.ftz.f32:
//   v   = max |x|                        exact in BF16
//   s   = g * (v * rcp(6))               two f32 products
//   S   = e4m3(s)                        RN, saturating at 448
//   o   = S != 0 ? rcp(f32(S) * rcp(g)) : 0
//   q   = E2M1(x * o)                    RN, saturating at 6, the product's
//                                        sign bit (-0.0 is code 8)
// The kernels use the same instruction. The host has no such instruction:
// Nvfp4VllmRcp there is the correctly rounded reciprocal with subnormals
// flushed, which PTX's 1-ulp bound allows the hardware to differ from in
// the last bit (gpu_check/nvfp4_vllm_check.py measures where).
#ifndef REFIT_EXEC_CONVERT_NVFP4_VLLM_MATH_H_
#define REFIT_EXEC_CONVERT_NVFP4_VLLM_MATH_H_

#include <cmath>

#include "exec/convert/nvfp4_math.h"

namespace refit {

// rcp.approx.ftz.f32 on the device; its host model (see above).
REFIT_NVFP4_HD float Nvfp4VllmRcp(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  const float tiny = 1.1754943508222875e-38f;  // 2^-126
  if (Nvfp4Abs(x) < tiny) x = std::copysign(0.0f, x);
  float r = 1.0f / x;
  if (Nvfp4Abs(r) < tiny) r = std::copysign(0.0f, r);
  return r;
#endif
}

// g = RN(RN(1 / max(amax, 1e-8)) * 2688): the quantizer's SFScale.
REFIT_NVFP4_HD float Nvfp4VllmGlobal(float amax) {
  const float a = amax > 1e-8f ? amax : 1e-8f;
  return Nvfp4Mul(Nvfp4Div(1.0f, a), 2688.0f);
}

// weight_scale_2 = RN(1 / g).
REFIT_NVFP4_HD float Nvfp4VllmWeightScale2(float g) { return Nvfp4Div(1.0f, g); }

// s = g * (v * rcp6) before the e4m3 cast, rcp6 = Nvfp4VllmRcp(6).
REFIT_NVFP4_HD float Nvfp4VllmBlockScale(float block_amax, float g, float rcp6) {
  return Nvfp4Mul(g, Nvfp4Mul(block_amax, rcp6));
}

// f32(S) * rcp(g): what o is the reciprocal of (o = 0 when S is 0).
REFIT_NVFP4_HD float Nvfp4VllmOutputDivisor(float scale_value, float rcp_g) {
  return Nvfp4Mul(scale_value, rcp_g);
}

// The 4-bit code of x * o.
REFIT_NVFP4_HD uint32_t Nvfp4VllmCode(float x, float o) {
  const float y = Nvfp4Mul(x, o);
  return (Nvfp4Bits(y) >> 31 << 3) | Nvfp4Magnitude(Nvfp4Abs(y));
}

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_NVFP4_VLLM_MATH_H_
