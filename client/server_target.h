// CheckServerTarget: whether a string names an address refitd can be at,
// checked before a client connects, so that a typo fails at once instead
// of after the connect timeout.
#ifndef REFIT_CLIENT_SERVER_TARGET_H_
#define REFIT_CLIENT_SERVER_TARGET_H_

#include <string>

#include "absl/status/status.h"

namespace refit {

// A gRPC target refitd can be at: host:port, or one of gRPC's own
// "dns:[//authority/]host:port", "ipv4:", "ipv6:", "unix:",
// "unix-abstract:" targets. A URL ("http://...") is refused: gRPC would
// take it for a host name and wait the whole timeout.
// Fails with INVALID_ARGUMENT naming the target and what is wrong with it
// (no port, not a port, not a host name, a URL, empty).
absl::Status CheckServerTarget(const std::string& target);

}  // namespace refit

#endif  // REFIT_CLIENT_SERVER_TARGET_H_
