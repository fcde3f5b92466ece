#include "layout/dtype.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace refit {

namespace {
struct DTypeInfo {
  DType type;
  int64_t size;
  const char* name;
  const char* aliases[4];
};
constexpr DTypeInfo kTable[] = {
    {DType::kBF16, 2, "bf16", {"bfloat16", nullptr}},
    {DType::kF16, 2, "f16", {"float16", "half", "fp16", nullptr}},
    {DType::kF32, 4, "f32", {"float32", "float", "fp32", nullptr}},
    {DType::kF8E4M3, 1, "f8e4m3", {"f8_e4m3", "float8_e4m3fn", "fp8", nullptr}},
    {DType::kF8E5M2, 1, "f8e5m2", {"f8_e5m2", "float8_e5m2", nullptr}},
    {DType::kI8, 1, "i8", {"int8", nullptr}},
    {DType::kU8, 1, "u8", {"uint8", nullptr}},
    {DType::kI32, 4, "i32", {"int32", nullptr}},
    {DType::kI64, 8, "i64", {"int64", nullptr}},
    {DType::kF64, 8, "f64", {"float64", "double", nullptr}},
    {DType::kBytes, 1, "bytes", {"byte", nullptr}},
};
}  // namespace

int64_t DTypeSize(DType t) {
  for (const auto& e : kTable) {
    if (e.type == t) return e.size;
  }
  return 1;
}

absl::string_view DTypeName(DType t) {
  for (const auto& e : kTable) {
    if (e.type == t) return e.name;
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  for (const auto& e : kTable) {
    if (lower == e.name) return e.type;
    for (const char* const* a = e.aliases; *a != nullptr; ++a) {
      if (lower == *a) return e.type;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\""));
}

bool IsValidDType(int32_t value) {
  for (const auto& e : kTable) {
    if (static_cast<int32_t>(e.type) == value) return true;
  }
  return false;
}

}  // namespace refit
