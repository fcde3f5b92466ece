#include "mapping/validate.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

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
  // The rank's expected buffers [begin, end) of the layout, looked up by
  // name in place (as RankBuffers lists them, without copying them).
  int32_t begin = 0, end = 0;
  if (rank + 1 < static_cast<int32_t>(side.rank_begin.size())) {
    begin = side.rank_begin[rank];
    end = side.rank_begin[rank + 1];
  }
  absl::flat_hash_map<absl::string_view, int32_t> want;
  want.reserve(end - begin);
  for (int32_t b = begin; b < end; ++b) want[side.layout.buffers[b].name] = b;
  absl::flat_hash_map<absl::string_view, int> seen;
  seen.reserve(registered.size());
  std::vector<std::string> errors;
  const std::string where = absl::StrCat("rank ", rank, ": parameter ");
  // Parameters by (their dtype, the expected one), and that error's line.
  std::map<std::pair<std::string, std::string>, std::vector<absl::string_view>> wrong_dtype;
  std::map<std::pair<std::string, std::string>, size_t> dtype_line;
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
    const BufferSpec& spec = side.layout.buffers[it->second];
    const BufferInfo& info = side.buffer_info[it->second];
    if (r.shape != info.shape) {
      errors.push_back(absl::StrCat(where, r.name, " has shape ",
                                    ShapeString(r.shape), ", expected ",
                                    ShapeString(info.shape)));
    }
    if (r.dtype != info.dtype) {
      // One cause, one line: every parameter of the same wrong dtype together.
      const auto dtypes = std::make_pair(std::string(DTypeName(r.dtype)),
                                         std::string(DTypeName(info.dtype)));
      std::vector<absl::string_view>& names = wrong_dtype[dtypes];
      if (names.empty()) {
        dtype_line[dtypes] = errors.size();
        errors.emplace_back();  // its place, filled below
      }
      names.push_back(r.name);
    }
    // Bytes follow from shape and dtype: a mismatch of either says it.
    if (r.shape == info.shape && r.dtype == info.dtype && r.byte_size != spec.byte_size) {
      errors.push_back(absl::StrCat(where, r.name, " has ", r.byte_size,
                                    " bytes, expected ", spec.byte_size));
    }
  }
  for (const auto& [dtypes, names] : wrong_dtype) {
    std::string& line = errors[dtype_line[dtypes]];
    if (names.size() == 1) {
      line = absl::StrCat(where, names[0], " has dtype ", dtypes.first, ", expected ",
                          dtypes.second);
      continue;
    }
    constexpr size_t kNamed = 3;
    line = absl::StrCat(
        "rank ", rank, ": ", names.size(), " parameters have dtype ", dtypes.first,
        ", expected ", dtypes.second, ": ",
        absl::StrJoin(names.begin(), names.begin() + std::min(names.size(), kNamed), ", "),
        names.size() > kNamed ? absl::StrCat(" and ", names.size() - kNamed, " more") : "");
  }
  std::vector<std::string> missing;
  for (int32_t b = begin; b < end; ++b) {
    const std::string& name = side.layout.buffers[b].name;
    if (!seen.contains(name)) missing.push_back(name);
  }
  if (!missing.empty()) {
    errors.push_back(absl::StrCat("rank ", rank, ": missing parameters: ",
                                  absl::StrJoin(missing, ", ")));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace refit
