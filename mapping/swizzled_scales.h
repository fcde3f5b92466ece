// FlashInfer / CUTLASS's 128 x 4 block-scale tiles, as vLLM writes them
// after loading (swizzle_blockscale for NVFP4, vllm/model_executor/layers/
// quantization/utils/nvfp4_utils.py at 4159f5b; swizzle_mxfp8_scale for
// MXFP8, quantization/utils/mxfp8_utils.py, read at f195871's
// kernels/linear/mxfp8/flashinfer.py): an [M, C] scale matrix zero-padded
// to [Mp, Cp] (M rounded up to 128, C to 4), viewed as [Mp/128, 4, 32,
// Cp/4, 4] and permuted to [Mp/128, Cp/4, 32, 4, 4]. The layout builder
// places scale parts with these runs (mapping/layout_builder.h).
#ifndef REFIT_MAPPING_SWIZZLED_SCALES_H_
#define REFIT_MAPPING_SWIZZLED_SCALES_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "layout/layout.h"

namespace refit {

// The byte offset of element (m, c) of a swizzled matrix whose padded
// columns are `padded_cols` (Cp).
int64_t SwizzledScaleOffset(int64_t m, int64_t c, int64_t padded_cols);

// The bytes of `lead` consecutive swizzled matrices of `rows` x `cols`
// scales each ([lead * Mp * Cp] bytes) that hold padding, sorted, adjacent
// ranges merged.
std::vector<ByteRange> SwizzledScalePadding(int64_t lead, int64_t rows, int64_t cols);

// One run of a dim of a swizzled part: `n` indices from matrix row (or
// column) `at`, whose offsets are the splits' digits (outermost first).
struct SwizzleRun {
  int64_t at = 0;
  int64_t n = 0;
  absl::InlinedVector<DimSplit, 3> splits;
};

// Rows [r0, r1) as runs, in order: partial 32-row groups, the groups of a
// partial 128-row tile, whole tiles (strides for `padded_cols` = Cp).
std::vector<SwizzleRun> SwizzleRowRuns(int64_t r0, int64_t r1, int64_t padded_cols);

// Columns [c0, c1) as runs: partial 4-column tiles, whole tiles, the tiles
// `tile_stride` bytes apart (512 in the 128 x 4 order; DeepGEMM's packed
// UE8M0 scales: 4 * their aligned rows, mapping/packed_scales.h).
std::vector<SwizzleRun> SwizzleColRuns(int64_t c0, int64_t c1, int64_t tile_stride);

}  // namespace refit

#endif  // REFIT_MAPPING_SWIZZLED_SCALES_H_
