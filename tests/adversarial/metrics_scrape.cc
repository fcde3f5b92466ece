// MetricsPort and ScrapeMetrics (see metrics_scrape.h).
#include "tests/adversarial/metrics_scrape.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "absl/time/clock.h"
#include "common/file.h"
#include "tests/adversarial/h2_wire.h"

namespace refit::testing {

int MetricsPort(const std::string& log) {
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> text = ReadFileToString(log, 1 << 20);
    std::smatch m;
    if (text.ok() && std::regex_search(*text, m, std::regex("metrics on port (\\d+)"))) {
      return std::stoi(m[1]);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return 0;
}

std::string ScrapeMetrics(int port) {
  const int fd = Dial(port);
  if (fd < 0) return "";
  std::string page;
  if (SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) {
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 5000) <= 0) break;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      page.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return page;
}

}  // namespace refit::testing
