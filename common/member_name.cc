#include "common/member_name.h"

#include "absl/strings/str_cat.h"

namespace refit {

std::string MemberName(bool trainer, absl::string_view engine_id, int32_t rank) {
  if (trainer) return absl::StrCat("trainer rank ", rank);
  if (engine_id.empty()) return absl::StrCat("engine rank ", rank);
  return absl::StrCat("engine ", engine_id, " rank ", rank);
}

}  // namespace refit
