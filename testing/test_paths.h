// Paths a Bazel test reads and writes: its runfiles and its own temporary
// folder, from the TEST_SRCDIR and TEST_TMPDIR that `bazel test` sets.
#ifndef REFIT_TESTING_TEST_PATHS_H_
#define REFIT_TESTING_TEST_PATHS_H_

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace refit::testing {

// Returns the runfile at workspace-relative `path` (e.g. "server/refitd").
inline std::string Runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return absl::StrCat(root == nullptr ? "." : root, "/refit/", path);
}

// Returns `name` inside the test's temporary folder.
inline std::string TmpFile(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return absl::StrCat(root == nullptr ? "/tmp" : root, "/", name);
}

}  // namespace refit::testing

#endif  // REFIT_TESTING_TEST_PATHS_H_
