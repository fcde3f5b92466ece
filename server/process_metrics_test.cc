#include "server/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

// Returns each sample line's value by metric name.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find(' ');
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(sp + 1), &v)) << line;
    m[line.substr(0, sp)] = v;
  }
  return m;
}

TEST(ProcessMetricsTest, ThisProcessFiguresAreThere) {
  std::map<std::string, double> m = Samples(ProcessMetricsText());
  ASSERT_EQ(m.size(), 6u) << ProcessMetricsText();
  EXPECT_GE(m["process_cpu_seconds_total"], 0);
  EXPECT_GT(m["process_resident_memory_bytes"], 1 << 20);
  EXPECT_GE(m["process_virtual_memory_bytes"], m["process_resident_memory_bytes"]);
  EXPECT_GE(m["process_max_fds"], m["process_open_fds"]);
  // Started within the last hour, not in the future.
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_LE(m["process_start_time_seconds"], now + 1);
  EXPECT_GT(m["process_start_time_seconds"], now - 3600);
}

TEST(ProcessMetricsTest, OpenFdsCountsTheFilesThisProcessOpens) {
  const double before = Samples(ProcessMetricsText())["process_open_fds"];
  int fds[3];
  for (int& fd : fds) fd = open("/dev/null", O_RDONLY);
  const double during = Samples(ProcessMetricsText())["process_open_fds"];
  for (int fd : fds) close(fd);
  EXPECT_EQ(during, before + 3);
  EXPECT_EQ(Samples(ProcessMetricsText())["process_open_fds"], before);
}

}  // namespace
}  // namespace refit
