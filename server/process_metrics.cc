// process_* metrics from /proc (see process_metrics.h).
#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace refit {
namespace {

void Sample(std::string* out, const char* name, const char* type, const char* help,
            const std::string& value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n",
                  name, " ", value, "\n");
}

std::string ReadSmall(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Returns the fields of /proc/self/stat after the command name, so that
// fields[0] is field 3 (state) of proc(5); empty when unreadable.
std::vector<std::string> StatFields() {
  const std::string stat = ReadSmall("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return {};
  return absl::StrSplit(stat.substr(paren + 1), ' ', absl::SkipEmpty());
}

// Returns the system's boot time (seconds since the epoch); 0 when unknown.
int64_t BootTime() {
  std::istringstream in(ReadSmall("/proc/stat"));
  std::string line;
  while (std::getline(in, line)) {
    int64_t t = 0;
    if (line.rfind("btime ", 0) == 0 && absl::SimpleAtoi(line.substr(6), &t)) return t;
  }
  return 0;
}

}  // namespace

std::string ProcessMetricsText() {
  std::string out;
  const std::vector<std::string> f = StatFields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const int64_t page = sysconf(_SC_PAGESIZE);
  // proc(5) fields 14 utime, 15 stime, 22 starttime, 23 vsize, 24 rss
  // (indices here are field - 3).
  int64_t utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (f.size() > 21 && ticks > 0 && absl::SimpleAtoi(f[11], &utime) &&
      absl::SimpleAtoi(f[12], &stime) && absl::SimpleAtoi(f[19], &start) &&
      absl::SimpleAtoi(f[20], &vsize) && absl::SimpleAtoi(f[21], &rss)) {
    Sample(&out, "process_cpu_seconds_total", "counter",
           "User and system CPU time spent in seconds.",
           absl::StrFormat("%.2f", (utime + stime) / ticks));
    Sample(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           absl::StrCat(rss * page));
    Sample(&out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
           absl::StrCat(vsize));
    if (const int64_t boot = BootTime(); boot > 0) {
      Sample(&out, "process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.",
             absl::StrFormat("%.2f", boot + start / ticks));
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    int64_t n = 0;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    Sample(&out, "process_open_fds", "gauge", "Number of open file descriptors.",
           absl::StrCat(n - 1));  // not the one reading the directory
  }
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    Sample(&out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
           absl::StrCat(static_cast<int64_t>(lim.rlim_cur)));
  }
  return out;
}

}  // namespace refit
