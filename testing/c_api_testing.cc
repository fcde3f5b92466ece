// The testing ABI over member_patterns.h (see c_api_testing.h).
#include "testing/c_api_testing.h"

#include "client/internal/c_abi.h"
#include "common/status_macros.h"
#include "testing/member_patterns.h"

using refit::internal_c_abi::Guard;
using refit::internal_c_abi::NamedPointers;
using refit::internal_c_abi::NeedMember;

extern "C" {

int refit_testing_fill_pattern(refit_member* member, int64_t version, int32_t n,
                               const char* const* names, void* const* host_ptrs) {
  return Guard("refit_testing_fill_pattern", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(auto host, NamedPointers(n, names, host_ptrs));
    return refit::testing::FillMemberPattern(*member->m, version, host);
  });
}

int refit_testing_check_pattern(refit_member* member, int64_t version, int32_t n,
                                const char* const* names, void* const* host_ptrs) {
  return Guard("refit_testing_check_pattern", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(auto host, NamedPointers(n, names, host_ptrs));
    return refit::testing::CheckMemberPattern(*member->m, version, host);
  });
}

}  // extern "C"
