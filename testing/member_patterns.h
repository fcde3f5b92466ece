// Test patterns of a weight version (reference_copy.h) in the buffers of a
// client Member: trainers fill them before a round, engines check them
// after its commit, each from its own rank's layout, independently of the
// plan. For refit's tests, the demo and the GPU checks; the shipped client
// library has none of it (the testing C ABI, c_api_testing.h, wraps it).
#ifndef REFIT_TESTING_MEMBER_PATTERNS_H_
#define REFIT_TESTING_MEMBER_PATTERNS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "client/member.h"

namespace refit::testing {

// Writes weight version `version`'s pattern into every record of
// `member`'s rank. `host` maps buffer names to host copies to write
// instead of the registered buffers (required for device buffers: the
// caller copies them over); a name not given uses the registered buffer,
// which must then be host memory. Returns INVALID_ARGUMENT naming the
// member and the buffer for an unknown name, a null host copy, or a device
// buffer without a host copy.
absl::Status FillMemberPattern(const Member& member, int64_t version,
                               const std::map<std::string, char*>& host = {});

// Checks that every record of `member`'s rank holds version `version`'s
// pattern, reading the buffers as FillMemberPattern writes them. Returns
// INTERNAL naming the member and the first wrong elements (tensor, element,
// buffer), or INVALID_ARGUMENT as FillMemberPattern.
absl::Status CheckMemberPattern(const Member& member, int64_t version,
                                const std::map<std::string, char*>& host = {});

// As FillMemberPattern and CheckMemberPattern, for a version that changes
// about 1/`changed_every` of the words of version `base` into version
// `version`'s values (testing/reference_copy.h PatternOptions), the same
// elements each time: a delta round's input.
absl::Status FillMemberDelta(const Member& member, int64_t base, int64_t version,
                             int64_t changed_every,
                             const std::map<std::string, char*>& host = {});
absl::Status CheckMemberDelta(const Member& member, int64_t base, int64_t version,
                              int64_t changed_every,
                              const std::map<std::string, char*>& host = {});

}  // namespace refit::testing

#endif  // REFIT_TESTING_MEMBER_PATTERNS_H_
