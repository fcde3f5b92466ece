// DType: the element types refit moves. Bytes are moved as bytes; the dtype
// only gives the element size and is checked for agreement between sides.
#ifndef REFIT_LAYOUT_DTYPE_H_
#define REFIT_LAYOUT_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace refit {

enum class DType : int32_t {
  kBF16 = 1,
  kF16 = 2,
  kF32 = 3,
  kF8E4M3 = 4,
  kF8E5M2 = 5,
  kI8 = 6,
  kU8 = 7,
  kI32 = 8,
  kI64 = 9,
  kF64 = 10,
  kBytes = 11,  // an untyped byte view (element size 1)
};

// Element size in bytes (1, 2, 4 or 8).
int64_t DTypeSize(DType t);

// Canonical lower-case name: "bf16", "f16", "f32", "f8e4m3", "f8e5m2", "i8",
// "u8", "i32", "i64", "f64", "bytes".
absl::string_view DTypeName(DType t);

// Parses a canonical name or a common alias ("bfloat16", "float32", "F32",
// "BF16", "F8_E4M3" (safetensors), "float8_e4m3fn" (torch), ...).
// Fails with INVALID_ARGUMENT naming the unknown dtype.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// True for a value of the enum (for data received from peers).
bool IsValidDType(int32_t value);

}  // namespace refit

#endif  // REFIT_LAYOUT_DTYPE_H_
