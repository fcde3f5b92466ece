// Quantized formats as rows of one table: per format and scale layout, the
// block shape, the code and scale dtypes, whether a global scale rides
// along, and how the scales are laid out for the kernel that reads them.
// The planner, the host and CUDA converters and the fused pull read their
// block sizes and dtypes from here; a new format is a new row plus its
// kernels.
#ifndef REFIT_LAYOUT_QUANT_FORMAT_H_
#define REFIT_LAYOUT_QUANT_FORMAT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "layout/dtype.h"

namespace refit {

enum class QuantFormat : int32_t {
  kFp8Tensor = 1,             // e4m3, one f32 scale per tensor (per expert)
  kFp8Block = 2,              // e4m3, one f32 scale per block x block tile
  kFp8BlockUe8m0 = 3,         // the same, every scale a power of two
  kFp8BlockRequantUe8m0 = 4,  // kFp8Block requantized to power-of-two scales
  kMxfp8 = 5,                 // e4m3, one E8M0 byte per 1 x 32 block
  kNvfp4 = 6,                 // E2M1 pairs, e4m3 per 1 x 16 block, f32 global
};

// How a weight's scales lie in the engine tensor.
enum class ScaleSwizzle : int32_t {
  kRowMajor = 0,     // the checkpoint's layout: row-major over the tile grid
  kTiles128x4 = 1,   // FlashInfer / CUTLASS 128 x 4 tiles, padded to whole
                     // tiles (mapping/swizzled_scales.h has the offsets)
  kPackedUe8m0 = 2,  // DeepGEMM on SM100: one exponent byte per weight row
                     // and 128 columns, four to an int32, MN-major, rows
                     // padded to a multiple of 4 (exec/convert/
                     // deepgemm_sm100_scales.h has the layout)
};

// One row of the table.
struct QuantFormatRow {
  QuantFormat format;
  ScaleSwizzle swizzle;
  const char* name;  // "fp8_block", "fp8_block_requant_ue8m0_packed", "mxfp8/128x4", ...
  // Elements per block along the second-last and the last dim; 0 and 0 for
  // one scale per tensor. kFp8Block*: the planner's fp8_block option sets
  // both (the row holds its default, 128).
  int64_t block_rows;
  int64_t block_cols;
  DType code_dtype;        // the engine weight's dtype
  int64_t codes_per_byte;  // 2 for packed E2M1, else 1
  DType scale_dtype;       // kF32, kU8 (E8M0 exponent bytes) or kF8E4M3
  bool pow2_scales;        // every scale a power of two
  bool global_scale;       // an f32 scale per parameter (per expert) too
};

// The table, one row per (format, swizzle) refit writes.
inline constexpr QuantFormatRow kQuantFormatRows[] = {
    {QuantFormat::kFp8Tensor, ScaleSwizzle::kRowMajor, "fp8_tensor", 0, 0, DType::kF8E4M3, 1,
     DType::kF32, false, false},
    {QuantFormat::kFp8Block, ScaleSwizzle::kRowMajor, "fp8_block", 128, 128, DType::kF8E4M3, 1,
     DType::kF32, false, false},
    {QuantFormat::kFp8BlockUe8m0, ScaleSwizzle::kRowMajor, "fp8_block_ue8m0", 128, 128,
     DType::kF8E4M3, 1, DType::kF32, true, false},
    {QuantFormat::kFp8BlockRequantUe8m0, ScaleSwizzle::kRowMajor, "fp8_block_requant_ue8m0",
     128, 128, DType::kF8E4M3, 1, DType::kF32, true, false},
    // The scales as UE8M0 exponent bytes (the f32 scale's bits >> 23).
    {QuantFormat::kFp8BlockRequantUe8m0, ScaleSwizzle::kPackedUe8m0,
     "fp8_block_requant_ue8m0_packed", 128, 128, DType::kF8E4M3, 1, DType::kU8, true, false},
    {QuantFormat::kMxfp8, ScaleSwizzle::kRowMajor, "mxfp8", 1, 32, DType::kF8E4M3, 1,
     DType::kU8, true, false},
    {QuantFormat::kMxfp8, ScaleSwizzle::kTiles128x4, "mxfp8/128x4", 1, 32, DType::kF8E4M3, 1,
     DType::kU8, true, false},
    {QuantFormat::kNvfp4, ScaleSwizzle::kRowMajor, "nvfp4", 1, 16, DType::kU8, 2,
     DType::kF8E4M3, false, true},
    {QuantFormat::kNvfp4, ScaleSwizzle::kTiles128x4, "nvfp4/128x4", 1, 16, DType::kU8, 2,
     DType::kF8E4M3, false, true},
};

// The row of `f` with its scales in the checkpoint's row-major layout
// (every format has one; quant_format_test.cc checks it).
constexpr const QuantFormatRow& QuantFormatTraits(QuantFormat f) {
  for (const QuantFormatRow& r : kQuantFormatRows) {
    if (r.format == f && r.swizzle == ScaleSwizzle::kRowMajor) return r;
  }
  return kQuantFormatRows[0];  // unreachable for a value of the enum
}

// The row of `f` with scales laid out as `s`, for a pair the table has
// (constants; FindQuantFormat checks a pair that may be missing).
constexpr const QuantFormatRow& QuantFormatTraits(QuantFormat f, ScaleSwizzle s) {
  for (const QuantFormatRow& r : kQuantFormatRows) {
    if (r.format == f && r.swizzle == s) return r;
  }
  return kQuantFormatRows[0];  // unreachable for a row of the table
}

// The row of `f` with scales laid out as `s`; INVALID_ARGUMENT naming both
// when refit does not write that layout for that format.
absl::StatusOr<QuantFormatRow> FindQuantFormat(QuantFormat f, ScaleSwizzle s);

// The row of `f` whose scale elements are `scale_dtype`, the row-major one
// first (kFp8BlockRequantUe8m0: f32 scales are its row-major row, u8 ones
// its kPackedUe8m0 row); INVALID_ARGUMENT naming both when `f` has none.
absl::StatusOr<QuantFormatRow> FindQuantFormatByScale(QuantFormat f, DType scale_dtype);

// True for the formats of FP8 block x block tiles (kFp8Block and its UE8M0
// forms), whose block edge a model's weight_block_size sets.
constexpr bool IsFp8Block(QuantFormat f) { return QuantFormatTraits(f).block_rows > 1; }

// True when `v` is the value of a QuantFormat (a row of the table has it).
bool IsValidQuantFormat(int32_t v);

// The row-major row's name ("fp8_block", "mxfp8", "nvfp4", ...).
absl::string_view QuantFormatName(QuantFormat f);

// "row_major", "128x4", "packed_ue8m0".
absl::string_view ScaleSwizzleName(ScaleSwizzle s);

// Bytes of one scale element of `f` (4 for f32 scales, 1 for E8M0 and e4m3),
// its scales laid out as `s` (1 for kFp8BlockRequantUe8m0's packed exponent
// bytes); for a pair the table has.
int64_t ScaleElementBytes(QuantFormat f, ScaleSwizzle s = ScaleSwizzle::kRowMajor);

}  // namespace refit

#endif  // REFIT_LAYOUT_QUANT_FORMAT_H_
