// NewMemberSecret (see member_secret.h).
#include "common/member_secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <fstream>

#include "absl/strings/escaping.h"

namespace refit {

std::string NewMemberSecret() {
  char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      break;  // no getrandom: read the device instead
    }
  }
  if (got < sizeof(bytes)) {
    std::ifstream in("/dev/urandom", std::ios::binary);
    in.read(bytes, sizeof(bytes));
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

}  // namespace refit
