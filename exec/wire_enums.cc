// Wire enum conversions (see wire_enums.h).
#include "exec/wire_enums.h"

#include "absl/strings/str_cat.h"

namespace refit {

v1::Side SideToProto(Side side) {
  return side == Side::kTrainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE;
}

absl::StatusOr<Side> SideFromProto(v1::Side side, absl::string_view field) {
  switch (side) {
    case v1::SIDE_TRAINER:
      return Side::kTrainer;
    case v1::SIDE_ENGINE:
      return Side::kEngine;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", static_cast<int>(side),
          " is neither SIDE_TRAINER nor SIDE_ENGINE"));
  }
}

}  // namespace refit
