#include "reshard/tensor_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reshard/box.h"

namespace refit {

absl::Status ValidateTensorSpec(const TensorSpec& t) {
  if (t.name.empty()) return absl::InvalidArgumentError("tensor has no name");
  if (!IsValidDType(static_cast<int32_t>(t.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", t.name, ": invalid dtype"));
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

std::string TensorSpecString(const TensorSpec& t) {
  return absl::StrCat(t.name, " ", DTypeName(t.dtype), "[",
                      absl::StrJoin(t.shape, ", "), "]");
}

}  // namespace refit
