// DeepGEMM's SM100 (Blackwell) weight scales: a block-FP8 weight's 128 x 128
// tile scales, powers of two after vLLM's UE8M0 requantization
// (ScaleMode::kPow2Requant, quantize.h), as DeepGEMM reads them on SM100:
// one UE8M0 exponent per weight row and 128 columns, four packed to a
// little-endian int32, MN-major and TMA-aligned.
//
// Read upstream: vLLM deepgemm_post_process_fp8_weight_block
// (vllm/model_executor/layers/quantization/utils/fp8_utils.py at 364d019)
// requantizes with requant_weight_ue8m0_inplace and then calls DeepGEMM's
// transform_sf_into_required_layout (deepseek-ai/DeepGEMM csrc/apis/
// layout.hpp at 0274ad7) with recipe (1, 128, 128): on SM100 an f32 [mn,
// sf_k] scale with gran_mn 128 is broadcast to rows (index_select of row //
// 128) and handed to get_mn_major_tma_aligned_packed_ue8m0_tensor
// (csrc/jit_kernels/impls/smxx_layout.hpp at 0274ad7; its torch statement
// get_mn_major_tma_aligned_packed_ue8m0_tensor_torch): byte = f32 bits >>
// 23, rows padded to get_tma_aligned_size(mn, 4) = a multiple of 4, the
// sf_k exponents of a row padded with zeros to a multiple of 4, four
// consecutive exponents one int32, stored with strides (1, aligned_mn):
// [ceil(sf_k / 4), aligned_mn] row-major per expert, experts one after
// another. SGLang's transform_scale_ue8m0 (python/sglang/srt/layers/
// quantization/fp8_utils.py) calls the same DeepGEMM function.
#ifndef REFIT_EXEC_CONVERT_DEEPGEMM_SM100_SCALES_H_
#define REFIT_EXEC_CONVERT_DEEPGEMM_SM100_SCALES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace refit {

// The shape of one expert's packed scales for an [n, k] weight: int32
// columns ceil(ceil(k / 128) / 4) (= ceil(k / 512)) and the TMA-aligned
// rows align(n, 4); bytes = 4 * packed_k * aligned_n.
struct DeepgemmSm100ScaleShape {
  int64_t packed_k = 0;
  int64_t aligned_n = 0;
  int64_t bytes() const { return 4 * packed_k * aligned_n; }
};
DeepgemmSm100ScaleShape DeepgemmSm100Scales(int64_t n, int64_t k);

// Packs `experts` weights' tile scales (f32 [experts, ceil(n/128),
// ceil(k/128)] row-major, each a positive normal power of two) into `out`
// (experts * DeepgemmSm100Scales(n, k).bytes() bytes; the padding rows and
// columns are zero). INVALID_ARGUMENT naming `tensor` when n, k or experts
// is not positive, the sizes disagree, or a scale is not a power of two
// UE8M0 holds exactly (its first such tile named).
absl::Status PackDeepgemmSm100Scales(absl::Span<const float> tile_scales, int64_t experts,
                                     int64_t n, int64_t k, absl::Span<uint8_t> out,
                                     const std::string& tensor);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_DEEPGEMM_SM100_SCALES_H_
