// Raising the process's open-file limit: refitd holds one descriptor per
// connection, and the common soft limit of 1024 is below what a job of
// ~1,000 members needs.
#ifndef REFIT_COMMON_FD_LIMIT_H_
#define REFIT_COMMON_FD_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace refit {

// Raises the soft RLIMIT_NOFILE to the hard limit. Returns the soft limit in
// force afterwards; INTERNAL naming the system's reason when it cannot be
// read or set.
absl::StatusOr<int64_t> RaiseFdLimitToHard();

}  // namespace refit

#endif  // REFIT_COMMON_FD_LIMIT_H_
