#include "common/huge_pages.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace refit {

namespace {
constexpr char kTunable[] = "glibc.malloc.hugetlb";
}  // namespace

bool ThpModeIsMadvise() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find("[madvise]") != std::string::npos;
}

std::string TunablesWithHugePages(const char* existing) {
  const std::string cur = existing == nullptr ? "" : existing;
  // Tunables are "name=value" items separated by ':'.
  size_t pos = 0;
  while (pos <= cur.size()) {
    size_t end = cur.find(':', pos);
    if (end == std::string::npos) end = cur.size();
    const std::string item = cur.substr(pos, end - pos);
    if (item.compare(0, sizeof(kTunable) - 1, kTunable) == 0 &&
        item.size() >= sizeof(kTunable) && item[sizeof(kTunable) - 1] == '=') {
      return "";
    }
    pos = end + 1;
  }
  const std::string add = std::string(kTunable) + "=1";
  return cur.empty() ? add : cur + ":" + add;
}

void ReexecWithHugePages(char** argv) {
#if defined(__GLIBC__) && defined(__linux__)
  const char* opt = getenv("REFIT_HUGE_PAGES");
  if (opt != nullptr && std::string(opt) == "0") return;
  const std::string value = TunablesWithHugePages(getenv("GLIBC_TUNABLES"));
  if (value.empty() || !ThpModeIsMadvise()) return;
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed: run on without huge pages (the tunable stays set, so a
  // child we start does not try again).
#else
  (void)argv;
#endif
}

}  // namespace refit
