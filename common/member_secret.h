// Member secrets: the random token refitd binds to a member at Register and
// checks on every later call that acts for that member, so that no other
// caller can report, leave, watch or set keys in its name.
#ifndef REFIT_COMMON_MEMBER_SECRET_H_
#define REFIT_COMMON_MEMBER_SECRET_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace refit {

// Longest member secret refitd accepts from a client.
inline constexpr size_t kMaxMemberSecretBytes = 64;

// Returns a new secret: 128 bits from the kernel's random source
// (getrandom), as 32 hex digits.
std::string NewMemberSecret();
// Compare secrets with ConstantTimeEquals (constant_time.h).

}  // namespace refit

#endif  // REFIT_COMMON_MEMBER_SECRET_H_
