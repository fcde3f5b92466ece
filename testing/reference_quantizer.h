// The reference blockwise FP8 quantizer, written plainly (tile by tile, and
// e4m3 by searching every code for the nearest value) to check refit's own
// (exec/convert/quantize.h, exec/convert/cuda/convert_kernels.h) against.
#ifndef REFIT_TESTING_REFERENCE_QUANTIZER_H_
#define REFIT_TESTING_REFERENCE_QUANTIZER_H_

#include <cstdint>
#include <vector>

namespace refit::testing {

// The e4m3 code nearest to x after clamping to [-448, 448] (ties to the
// even code), by search over all codes.
uint8_t ReferenceE4M3(float x);

struct Quantized {
  std::vector<uint8_t> values;  // row-major, the tensor's shape
  std::vector<float> scales;    // row-major, the tile grid
  std::vector<uint8_t> scale_bytes;  // MXFP8: E8M0 bytes, the block grid;
                                     // NVFP4: e4m3 bytes, the 1 x 16 grid
  std::vector<float> global_scales;  // NVFP4: per leading index
};

// Quantizes a whole tensor of `shape` (f32 values, row-major; tiles of
// `block` x `block` on the last two dims, 1 on the others).
Quantized ReferenceQuantize(const std::vector<float>& values,
                            const std::vector<int64_t>& shape, int64_t block,
                            bool ue8m0);

// What vLLM holds after loading the block-FP8 checkpoint `checkpoint` (of
// `shape`) on its DeepGEMM path with UE8M0 scales (VLLM_USE_DEEP_GEMM_E8M0=1,
// the default): every tile dequantized in f32 (code value times its
// scale), then quantized again as vLLM's per_block_cast_to_fp8(use_ue8m0=
// True) does: amax of the dequantized tile, clamped to 1e-4, divided by
// 448, rounded up to a power of two (2^ceil(log2 s)), codes e4m3(d * (1 /
// s)). Read from vllm/model_executor/layers/quantization/utils/
// fp8_utils.py (requant_weight_ue8m0_inplace) at 364d019 and
// vllm/utils/deep_gemm.py at 779d1fc. Decodes e4m3 by its bit fields.
Quantized ReferenceRequantUe8m0(const Quantized& checkpoint,
                                const std::vector<int64_t>& shape, int64_t block);

// vLLM's MXFP8 quantization of a whole tensor of `shape` (last dim a
// multiple of 32), written from _mxfp8_e4m3_quantize_torch (vllm/
// model_executor/layers/quantization/utils/mxfp8_utils.py, the version with
// ceil(log2(amax / 448))): per block of 32 along the last dim, amax clamped
// below to 2^-126, e = ceil(log2(amax / 448)) + 127 clamped to [0, 254]
// (found by stepping a power of two, the quotient in f32), codes
// ReferenceE4M3(x / 2^(e - 127)); scale_bytes holds e, [..., K / 32].
Quantized ReferenceMxfp8Quantize(const std::vector<float>& values,
                                 const std::vector<int64_t>& shape);

// The E2M1 code nearest to y after clamping to [-6, 6] (ties to the even
// code), by search over the eight magnitudes; the sign bit set when y < 0.
uint8_t ReferenceE2M1(float y);

// NVFP4 as ModelOpt's NVFP4QTensor.quantize computes it (modelopt/torch/
// quantization/qtensor/nvfp4_tensor.py, NVIDIA/Model-Optimizer at 211c6b3;
// vLLM's ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE load its bytes
// as they are), written plainly: per leading index l (expert) the global
// scale g = amax * f32(1 / 2688) (ModelOpt's amax / (6 * 448) as torch on
// CUDA computes it) with amax = global_amax[l] when given (a fused
// group's amax), else max |x| over the slice; per 16-block along the last
// dim the scale s = bamax / (6 * g) (1 when 0, at least 2^-9) rounded by
// ReferenceE4M3; codes ReferenceE2M1(x / (e4m3 value * g)), packed two per
// byte, even element low. values: packed bytes [..., K / 2]; scale_bytes:
// [..., K / 16]; global_scales: g per leading index.
Quantized ReferenceNvfp4Quantize(const std::vector<float>& values,
                                 const std::vector<int64_t>& shape,
                                 const std::vector<float>& global_amax = {});

}  // namespace refit::testing

#endif  // REFIT_TESTING_REFERENCE_QUANTIZER_H_
