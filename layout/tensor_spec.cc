#include "layout/tensor_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "layout/box.h"

namespace refit {

const char* TransformName(Transform t) {
  switch (t) {
    case Transform::kNone:
      return "none";
    case Transform::kNegExp:
      return "neg_exp";
    case Transform::kNvfp4Vllm:
      return "nvfp4_vllm";
  }
  return "unknown";
}

const char* QuantRoleName(QuantRole r) {
  switch (r) {
    case QuantRole::kNone:
      return "none";
    case QuantRole::kCodes:
      return "codes";
    case QuantRole::kScales:
      return "scales";
    case QuantRole::kGlobalScale:
      return "global_scale";
  }
  return "unknown";
}

TensorSpec WithFormat(TensorSpec t, QuantFormat f, QuantRole role) {
  t.format = f;
  t.quant_role = role;
  return t;
}

std::string TensorFormatString(const TensorSpec& t) {
  if (!t.format.has_value()) return "";
  return absl::StrCat(QuantFormatName(*t.format), " ", QuantRoleName(t.quant_role));
}

namespace {

// The format and role agree with each other and with the dtype.
absl::Status ValidateFormat(const TensorSpec& t) {
  const int32_t role = static_cast<int32_t>(t.quant_role);
  if (role < 0 || role > static_cast<int32_t>(QuantRole::kGlobalScale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", t.name, ": unknown format role ", role));
  }
  if (!t.format.has_value()) {
    if (t.quant_role == QuantRole::kNone) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", t.name, ": role ", QuantRoleName(t.quant_role), " without a format"));
  }
  if (!IsValidQuantFormat(static_cast<int32_t>(*t.format))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", t.name, ": unknown format ", static_cast<int32_t>(*t.format)));
  }
  const QuantFormatRow& row = QuantFormatTraits(*t.format);
  const std::string f(QuantFormatName(*t.format));
  switch (t.quant_role) {
    case QuantRole::kNone:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": format ", f, " without a role"));
    case QuantRole::kCodes:
      if (t.dtype == row.code_dtype) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, ": format ", f, " holds its codes as ",
          DTypeName(row.code_dtype), ", not ", DTypeName(t.dtype)));
    case QuantRole::kScales:
      return AnnotateStatus(FindQuantFormatByScale(*t.format, t.dtype).status(),
                            absl::StrCat("tensor ", t.name));
    case QuantRole::kGlobalScale:
      if (row.global_scale && t.dtype == DType::kF32) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, ": a global scale is f32 of a format that has one (nvfp4), not ",
          DTypeName(t.dtype), " of ", f));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTensorSpec(const TensorSpec& t) {
  if (t.name.empty()) return absl::InvalidArgumentError("tensor has no name");
  if (t.stacked && (t.shape.empty() || t.name.find("{}") == std::string::npos)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stacked tensor ", t.name, " needs a \"{}\" in its name and rank >= 1"));
  }
  if (!IsValidDType(static_cast<int32_t>(t.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", t.name, ": invalid dtype"));
  }
  switch (t.transform) {
    case Transform::kNone:
      break;
    case Transform::kNegExp:
    case Transform::kNvfp4Vllm:
      if (t.dtype != DType::kF32) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": transform ",
                                                       TransformName(t.transform),
                                                       " needs f32, not ", DTypeName(t.dtype)));
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, ": unknown transform ",
          static_cast<int32_t>(t.transform)));
  }
  if (t.transform == Transform::kNvfp4Vllm &&
      (t.format != QuantFormat::kNvfp4 || t.quant_role != QuantRole::kGlobalScale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", t.name, ": transform nvfp4_vllm is for an NVFP4 global scale (format "
        "nvfp4, role global_scale), not ", t.format ? TensorFormatString(t) : "a plain tensor"));
  }
  REFIT_RETURN_IF_ERROR(ValidateFormat(t));
  int64_t n = DTypeSize(t.dtype);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, ": shape[", d, "] = ", t.shape[d], " is negative"));
    }
    if (!CheckedMul(n, t.shape[d], &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": byte size overflows int64"));
    }
  }
  return absl::OkStatus();
}

std::string MemberName(const TensorSpec& t, int64_t i) {
  if (!t.stacked) return t.name;
  std::string out = t.name;
  size_t pos = out.find("{}");
  if (pos != std::string::npos) out.replace(pos, 2, absl::StrCat(i));
  return out;
}

std::string DescribePart(const TensorSpec& t, const Box& box) {
  if (!t.stacked || box.rank() == 0) {
    return absl::StrCat(t.name, " ", box.ToString());
  }
  std::string name = t.name;
  size_t pos = name.find("{}");
  std::string range =
      box.shape(0) == 1 ? absl::StrCat(box.origin(0))
                        : absl::StrCat("{", box.origin(0), "..",
                                       box.limit(0) - 1, "}");
  if (pos != std::string::npos) name.replace(pos, 2, range);
  std::vector<int64_t> o(box.origin().begin() + 1, box.origin().end());
  std::vector<int64_t> s(box.shape().begin() + 1, box.shape().end());
  return absl::StrCat(name, " ", Box::Unchecked(o, s).ToString());
}

std::string TensorSpecString(const TensorSpec& t) {
  return absl::StrCat(t.name, " ", DTypeName(t.dtype), "[",
                      absl::StrJoin(t.shape, ", "), "]");
}

}  // namespace refit
