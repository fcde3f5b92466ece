// DashFlags (see dash_flags.h).
#include "testing/netns/dash_flags.h"

namespace refit {

std::map<std::string, std::string> DashFlags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    f[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "" : a.substr(eq + 1);
  }
  return f;
}

}  // namespace refit
