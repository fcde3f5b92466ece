// What the client library's C ABIs share (see c_abi.h).
#include "client/internal/c_abi.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace refit::internal_c_abi {
namespace {

thread_local std::string last_error;

}  // namespace

int Report(const absl::Status& s) {
  if (s.ok()) {
    last_error.clear();
    return 0;
  }
  last_error = s.ToString();
  return static_cast<int>(s.code());
}

const char* LastError() { return last_error.c_str(); }

char* Dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

absl::StatusOr<std::map<std::string, char*>> NamedPointers(
    int32_t n, const char* const* names, void* const* ptrs) {
  std::map<std::string, char*> out;
  if (n < 0 || (n > 0 && (names == nullptr || ptrs == nullptr))) {
    return absl::InvalidArgumentError("buffer arrays are null or n < 0");
  }
  for (int32_t i = 0; i < n; ++i) {
    if (names[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, ": name is null"));
    }
    if (!out.emplace(names[i], static_cast<char*>(ptrs[i])).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", names[i], " is given twice"));
    }
  }
  return out;
}

absl::Status NeedMember(const refit_member* m) {
  if (m == nullptr || m->m == nullptr) {
    return absl::InvalidArgumentError("member handle is null or closed");
  }
  return absl::OkStatus();
}

}  // namespace refit::internal_c_abi
