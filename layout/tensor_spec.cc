#include "layout/tensor_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "layout/box.h"

namespace refit {

const char* TransformName(Transform t) {
  switch (t) {
    case Transform::kNone:
      return "none";
    case Transform::kNegExp:
      return "neg_exp";
    case Transform::kPow2Ceil:
      return "pow2_ceil";
    case Transform::kUe8m0Requant:
      return "ue8m0_requant";
    case Transform::kNvfp4Vllm:
      return "nvfp4_vllm";
  }
  return "unknown";
}

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
    case Transform::kPow2Ceil:
    case Transform::kUe8m0Requant:
    case Transform::kNvfp4Vllm:
      if (t.dtype != DType::kF32 &&
          !(t.transform == Transform::kUe8m0Requant && t.dtype == DType::kU8)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", t.name, ": transform ", TransformName(t.transform),
            " needs f32", t.transform == Transform::kUe8m0Requant ? " or u8" : "",
            ", not ", DTypeName(t.dtype)));
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, ": unknown transform ",
          static_cast<int32_t>(t.transform)));
  }
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
