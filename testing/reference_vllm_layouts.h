// An independent host statement of what a vLLM engine rank holds, after
// loading and post-processing, for the weights refit's kernel layouts
// (engine spec kernel=) change: written from vLLM's loaders and
// process_weights_after_loading, not from mapping/'s tables, to check
// refit's engine bytes against.
//
// Read at vLLM commits 1436674 (model_executor/layers/quantization/fp8.py),
// 487151d (quantization/utils/flashinfer_utils.py: swap_w13_to_w31,
// prepare_fp8_moe_layer_for_fi), 364d019 (quantization/utils/fp8_utils.py:
// requant_weight_ue8m0_inplace, deepgemm_post_process_fp8_weight_block) and
// 779d1fc (utils/deep_gemm.py), and DeepGEMM 2f98946 (csrc/apis/layout.hpp:
// on SM90, FP32 128x128 weight scales are kept as they are; on SM100 they
// are packed as testing/reference_nvfp4_vllm.h's ReferenceDeepgemmSm100Scales
// states, DeepGEMM 0274ad7).
#ifndef REFIT_TESTING_REFERENCE_VLLM_LAYOUTS_H_
#define REFIT_TESTING_REFERENCE_VLLM_LAYOUTS_H_

#include <cstdint>
#include <vector>

namespace refit::testing {

// A 2-D checkpoint weight [rows, cols] as f32 values (row-major).
struct HostWeight {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
};

// How the engine stores weights: BF16, or block FP8 (128x128) as loaded
// from the FP8 checkpoint of the same values, and which post-processing
// ran after loading.
enum class VllmKernel { kCheckpoint, kFlashinfer, kDeepgemm, kDeepgemmSm100 };
struct VllmFormat {
  bool fp8 = false;
  VllmKernel kernel = VllmKernel::kCheckpoint;
};

// The bytes of one engine parameter: the weight (bf16 or e4m3) and, for
// FP8, its weight_scale_inv (f32, row-major; kDeepgemmSm100: DeepGEMM's
// packed int32 exponents per matrix, experts one after another).
struct EngineBytes {
  std::vector<uint8_t> weight, scale;
};

// One rank's part of a TP-sharded linear weight: rows [r0, r1) and columns
// [c0, c1) of `w` (block aligned under FP8), as vLLM holds it.
EngineBytes VllmLinear(const HostWeight& w, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1, const VllmFormat& f);

// A merged column-parallel module ([a_l; b_l], e.g. gate_up_proj): rows
// [r0, r1) of each of `parts`, concatenated.
EngineBytes VllmMerged(const std::vector<const HostWeight*>& parts, int64_t r0,
                       int64_t r1, const VllmFormat& f);

// FusedMoE's w13_weight of the experts `experts` (global indices, in
// local order) with intermediate rows [i0, i1) of each: per expert
// [gate_l; up_l] as loaded, [up_l; gate_l] after FlashInfer's
// swap_w13_to_w31 (kernel kFlashinfer), scales alike and clamped to at
// least 1e-10 as prepare_fp8_moe_layer_for_fi does (w2's too).
EngineBytes VllmW13(const std::vector<HostWeight>& gate, const std::vector<HostWeight>& up,
                    const std::vector<int64_t>& experts, int64_t i0, int64_t i1,
                    const VllmFormat& f);

// FusedMoE's w2_weight: columns [i0, i1) of each expert's down_proj.
EngineBytes VllmW2(const std::vector<HostWeight>& down, const std::vector<int64_t>& experts,
                   int64_t i0, int64_t i1, const VllmFormat& f);

}  // namespace refit::testing

#endif  // REFIT_TESTING_REFERENCE_VLLM_LAYOUTS_H_
