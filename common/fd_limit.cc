// RaiseFdLimitToHard (see fd_limit.h).
#include "common/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<int64_t> RaiseFdLimitToHard() {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return absl::InternalError(
        absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  if (lim.rlim_cur != lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      return absl::InternalError(absl::StrCat("setrlimit(RLIMIT_NOFILE, ",
                                              lim.rlim_max, "): ", std::strerror(errno)));
    }
  }
  return static_cast<int64_t>(lim.rlim_cur);
}

}  // namespace refit
