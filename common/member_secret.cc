// NewMemberSecret and SecretsEqual (see member_secret.h).
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

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace refit
