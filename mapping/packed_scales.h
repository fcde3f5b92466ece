// DeepGEMM's SM100 weight scales as vLLM holds them after loading
// (kernel=deepgemm-sm100): deepgemm_post_process_fp8_weight_block
// (vllm/model_executor/layers/quantization/utils/fp8_utils.py at 364d019)
// hands the requantized f32 tile scales to DeepGEMM's
// transform_sf_into_required_layout (deepseek-ai/DeepGEMM csrc/apis/
// layout.hpp at 0274ad7), which broadcasts each tile's scale to its rows
// and packs the UE8M0 exponents four to an int32, MN-major: one [rows,
// cols] matrix of exponent bytes (cols = ceil(K / 128)) is an int32 tensor
// stored as [ceil(cols / 4), align(rows, 4)], byte (r, c) at
// ((c / 4) * align(rows, 4) + r) * 4 + c % 4, every other byte zero
// (exec/convert/deepgemm_sm100_scales.h packs the same on the host). The
// layout builder places scale parts with these offsets
// (mapping/layout_builder.h).
#ifndef REFIT_MAPPING_PACKED_SCALES_H_
#define REFIT_MAPPING_PACKED_SCALES_H_

#include <cstdint>
#include <vector>

#include "layout/layout.h"

namespace refit {

// The rows of a packed matrix: `rows` rounded up to 4 (DeepGEMM's
// get_tma_aligned_size(rows, 4) for 4-byte elements).
int64_t PackedScaleRows(int64_t rows);
// Its int32 columns: ceil(cols / 4).
int64_t PackedScaleWords(int64_t cols);

// The byte offset of exponent (r, c) in a matrix of `aligned_rows` rows.
int64_t PackedScaleOffset(int64_t r, int64_t c, int64_t aligned_rows);

// The bytes of `lead` consecutive packed matrices of `rows` x `cols`
// exponents that hold padding (rows past `rows`, bytes past `cols` in the
// last int32 of a row), sorted, adjacent ranges merged.
std::vector<ByteRange> PackedScalePadding(int64_t lead, int64_t rows, int64_t cols);

}  // namespace refit

#endif  // REFIT_MAPPING_PACKED_SCALES_H_
