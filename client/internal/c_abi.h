// What the C ABIs of the client library share (client/c_api.cc, and the
// testing ABI testing/c_api_testing.cc): the member handle, the calling
// thread's last error, and the guard every entry point runs its body in.
// Not part of any public header: bindings see only c_api.h.
#ifndef REFIT_CLIENT_INTERNAL_C_ABI_H_
#define REFIT_CLIENT_INTERNAL_C_ABI_H_

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/member.h"

// The opaque handle of c_api.h.
struct refit_member {
  std::unique_ptr<refit::Member> m;
};

namespace refit::internal_c_abi {

// Records `s` as this thread's last error (cleared when OK) and returns 0
// or its absl::StatusCode.
int Report(const absl::Status& s);

// This thread's last error message ("" if none).
const char* LastError();

// Runs `f` (returning absl::Status) and reports its status; an exception
// becomes INTERNAL naming `what`. Returns what Report returns.
template <typename F>
int Guard(const char* what, F&& f) {
  try {
    return Report(f());
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat(what, ": ", e.what())));
  } catch (...) {
    return Report(absl::InternalError(absl::StrCat(what, ": unknown exception")));
  }
}

// A malloc'ed NUL-terminated copy of `s` (freed by refit_free), or null
// when out of memory.
char* Dup(const std::string& s);

// The n (names[i], ptrs[i]) pairs by name. INVALID_ARGUMENT for n < 0,
// null arrays when n > 0, a null name, or a name given twice.
absl::StatusOr<std::map<std::string, char*>> NamedPointers(
    int32_t n, const char* const* names, void* const* ptrs);

// OK for an open handle; INVALID_ARGUMENT for a null or closed one.
absl::Status NeedMember(const refit_member* m);

}  // namespace refit::internal_c_abi

#endif  // REFIT_CLIENT_INTERNAL_C_ABI_H_
