// Which addresses refitd can be reached at (see server_target.h).
#include "client/server_target.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace refit {
namespace {

// "host:port" with a port in 1..65535; the host a name, an IPv4 address or
// a bracketed IPv6 one.
absl::Status CheckHostPort(absl::string_view target, absl::string_view hostport) {
  const std::string expected = absl::StrCat(
      "server \"", target, "\": expected host:port, e.g. 127.0.0.1:50051 (refitd's "
      "default address)");
  const size_t colon = hostport.rfind(':');
  const size_t bracket = hostport.rfind(']');
  if (colon == absl::string_view::npos ||
      (bracket != absl::string_view::npos && colon < bracket)) {
    return absl::InvalidArgumentError(absl::StrCat(expected, "; it has no port"));
  }
  const absl::string_view host = hostport.substr(0, colon);
  int port = 0;
  if (host.empty() || !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(expected, "; \"", hostport.substr(colon + 1), "\" is not a port"));
  }
  for (char ch : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(ch)) || ch == '/' || ch == '@') {
      return absl::InvalidArgumentError(
          absl::StrCat(expected, "; the host \"", host, "\" is not a host name"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckServerTarget(const std::string& target) {
  if (target.empty()) {
    return absl::InvalidArgumentError(
        "server is empty: expected host:port, e.g. 127.0.0.1:50051");
  }
  for (absl::string_view scheme : {"unix:", "unix-abstract:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) return absl::OkStatus();
  }
  if (absl::StartsWith(target, "dns:")) {
    absl::string_view rest = absl::string_view(target).substr(4);
    if (absl::StartsWith(rest, "//")) {
      const size_t slash = rest.find('/', 2);
      if (slash == absl::string_view::npos) return CheckHostPort(target, "");
      rest = rest.substr(slash + 1);
    }
    return CheckHostPort(target, rest);
  }
  const size_t scheme = target.find("://");
  if (scheme != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server \"", target, "\": a refitd address is host:port, not a URL; use \"",
        target.substr(scheme + 3), "\" without \"", target.substr(0, scheme + 3), "\""));
  }
  return CheckHostPort(target, target);
}

}  // namespace refit
