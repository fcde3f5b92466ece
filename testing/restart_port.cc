// RestartablePort (see restart_port.h).
#include "testing/restart_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

constexpr int kLowest = 10000;

// The first port the kernel hands out for port 0.
int EphemeralStart() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(range >> low) || low <= kLowest) return 32768;
  return low;
}

// Whether 127.0.0.1:`port` binds now (the socket is closed again).
bool Binds(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

absl::StatusOr<int> RestartablePort() {
  const int high = EphemeralStart();
  std::random_device seed;
  std::mt19937 rng(seed());
  std::uniform_int_distribution<int> pick(kLowest, high - 1);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int port = pick(rng);
    if (Binds(port)) return port;
  }
  return absl::UnavailableError(
      absl::StrCat("no free port on 127.0.0.1 in [", kLowest, ", ", high, ") after 64 tries"));
}

}  // namespace refit
