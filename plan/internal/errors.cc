// Error reporting shared by the planner's phases.
#include "plan/internal/errors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit {
namespace internal_plan {
namespace {

constexpr int kMaxErrorLines = 50;

}  // namespace

std::string DstRank(int32_t r) { return absl::StrCat("engine rank ", r); }

absl::Status JoinErrors(const std::vector<std::string>& errors) {
  std::vector<std::string> lines;
  const int n = static_cast<int>(errors.size());
  for (int i = 0; i < n && i < kMaxErrorLines; ++i) lines.push_back(errors[i]);
  if (n > kMaxErrorLines) {
    lines.push_back(absl::StrCat("... and ", n - kMaxErrorLines, " more"));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

}  // namespace internal_plan
}  // namespace refit
