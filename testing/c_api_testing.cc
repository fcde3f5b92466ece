// The testing ABI over member_patterns.h (see c_api_testing.h).
#include "testing/c_api_testing.h"

#include <map>
#include <string>

#include "client/internal/c_abi.h"
#include "common/status_macros.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

using PatternFn = absl::Status (*)(const Member&, int64_t,
                                   const std::map<std::string, char*>&);

// Runs `fn` on the member's buffers, the n host copies given by name.
int RunPattern(const char* what, PatternFn fn, refit_member* member,
               int64_t version, int32_t n, const char* const* names,
               void* const* host_ptrs) {
  return internal_c_abi::Guard(what, [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(internal_c_abi::NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(auto host,
                           internal_c_abi::NamedPointers(n, names, host_ptrs));
    return fn(*member->m, version, host);
  });
}

}  // namespace
}  // namespace refit

extern "C" {

int refit_testing_fill_pattern(refit_member* member, int64_t version, int32_t n,
                               const char* const* names, void* const* host_ptrs) {
  return refit::RunPattern("refit_testing_fill_pattern",
                           refit::testing::FillMemberPattern, member, version, n,
                           names, host_ptrs);
}

int refit_testing_check_pattern(refit_member* member, int64_t version, int32_t n,
                                const char* const* names, void* const* host_ptrs) {
  return refit::RunPattern("refit_testing_check_pattern",
                           refit::testing::CheckMemberPattern, member, version, n,
                           names, host_ptrs);
}

}  // extern "C"
