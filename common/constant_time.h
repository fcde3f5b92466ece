// ConstantTimeEquals: the one comparison of secrets (the bearer token, member
// secrets) whose timing tells a wrong guess nothing.
#ifndef REFIT_COMMON_CONSTANT_TIME_H_
#define REFIT_COMMON_CONSTANT_TIME_H_

#include "absl/strings/string_view.h"

namespace refit {

// Returns whether `got` equals `expected`, in time that depends only on the
// length of `expected` (the secret's, not the guess's).
bool ConstantTimeEquals(absl::string_view got, absl::string_view expected);

}  // namespace refit

#endif  // REFIT_COMMON_CONSTANT_TIME_H_
