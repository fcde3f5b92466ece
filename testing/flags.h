// Flag lookup for refit's test and benchmark programs (GPU programs that
// run from the bundle; production mains parse their flags themselves).
#ifndef REFIT_TESTING_FLAGS_H_
#define REFIT_TESTING_FLAGS_H_

#include <cstring>
#include <string>

namespace refit::testing {

// The value of --name=VALUE among argv[1..argc), or `def` when absent (the
// last occurrence wins).
inline std::string FlagValue(int argc, char** argv, const std::string& name,
                             const std::string& def) {
  const std::string p = "--" + name + "=";
  std::string v = def;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], p.c_str(), p.size()) == 0) v = argv[i] + p.size();
  }
  return v;
}

}  // namespace refit::testing

#endif  // REFIT_TESTING_FLAGS_H_
