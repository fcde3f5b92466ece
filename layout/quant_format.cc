#include "layout/quant_format.h"

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<QuantFormatRow> FindQuantFormat(QuantFormat f, ScaleSwizzle s) {
  for (const QuantFormatRow& r : kQuantFormatRows) {
    if (r.format == f && r.swizzle == s) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("format ", QuantFormatName(f),
                                                 ": refit writes no scales laid out as ",
                                                 ScaleSwizzleName(s)));
}

absl::StatusOr<QuantFormatRow> FindQuantFormatByScale(QuantFormat f, DType scale_dtype) {
  const QuantFormatRow* found = nullptr;
  for (const QuantFormatRow& r : kQuantFormatRows) {
    if (r.format != f || r.scale_dtype != scale_dtype) continue;
    if (found == nullptr || r.swizzle == ScaleSwizzle::kRowMajor) found = &r;
  }
  if (found != nullptr) return *found;
  return absl::InvalidArgumentError(absl::StrCat("format ", QuantFormatName(f),
                                                 " has no scales of dtype ",
                                                 DTypeName(scale_dtype)));
}

bool IsValidQuantFormat(int32_t v) {
  for (const QuantFormatRow& r : kQuantFormatRows) {
    if (static_cast<int32_t>(r.format) == v) return true;
  }
  return false;
}

absl::string_view QuantFormatName(QuantFormat f) { return QuantFormatTraits(f).name; }

absl::string_view ScaleSwizzleName(ScaleSwizzle s) {
  switch (s) {
    case ScaleSwizzle::kRowMajor:
      return "row_major";
    case ScaleSwizzle::kTiles128x4:
      return "128x4";
    case ScaleSwizzle::kPackedUe8m0:
      return "packed_ue8m0";
  }
  return "unknown";
}

int64_t ScaleElementBytes(QuantFormat f, ScaleSwizzle s) {
  return DTypeSize(QuantFormatTraits(f, s).scale_dtype);
}

}  // namespace refit
