// Side names (see side.h).
#include "layout/side.h"

#include "absl/strings/str_cat.h"

namespace refit {

absl::string_view SideName(Side side) {
  return side == Side::kTrainer ? "trainer" : "engine";
}

absl::StatusOr<Side> ParseSide(absl::string_view name) {
  if (name == "trainer") return Side::kTrainer;
  if (name == "engine") return Side::kEngine;
  return absl::InvalidArgumentError(
      absl::StrCat("\"", name, "\" is neither \"trainer\" nor \"engine\""));
}

}  // namespace refit
