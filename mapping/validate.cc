#include "mapping/validate.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

}  // namespace

absl::Status ValidateRankBuffers(const MappedSide& side, int32_t rank,
                                 absl::Span<const LocalBuffer> registered) {
  if (rank < 0 || rank >= side.layout.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the world of ",
                     side.layout.world_size));
  }
  std::vector<LocalBuffer> expected = RankBuffers(side, rank);
  std::map<std::string, const LocalBuffer*> want;
  for (const LocalBuffer& b : expected) want[b.name] = &b;
  std::map<std::string, int> seen;
  std::vector<std::string> errors;
  const std::string where = absl::StrCat("rank ", rank, ": parameter ");
  for (const LocalBuffer& r : registered) {
    if (seen[r.name]++ > 0) {
      errors.push_back(absl::StrCat(where, r.name, " is registered twice"));
      continue;
    }
    auto it = want.find(r.name);
    if (it == want.end()) {
      errors.push_back(absl::StrCat(where, r.name,
                                    " is not in the layout of this rank"));
      continue;
    }
    const LocalBuffer& e = *it->second;
    if (r.shape != e.shape) {
      errors.push_back(absl::StrCat(where, r.name, " has shape ",
                                    ShapeString(r.shape), ", expected ",
                                    ShapeString(e.shape)));
    }
    if (r.dtype != e.dtype) {
      errors.push_back(absl::StrCat(where, r.name, " has dtype ",
                                    DTypeName(r.dtype), ", expected ",
                                    DTypeName(e.dtype)));
    }
    if (r.byte_size != e.byte_size) {
      errors.push_back(absl::StrCat(where, r.name, " has ", r.byte_size,
                                    " bytes, expected ", e.byte_size));
    }
  }
  std::vector<std::string> missing;
  for (const LocalBuffer& e : expected) {
    if (seen.find(e.name) == seen.end()) missing.push_back(e.name);
  }
  if (!missing.empty()) {
    errors.push_back(absl::StrCat("rank ", rank, ": missing parameters: ",
                                  absl::StrJoin(missing, ", ")));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace refit
