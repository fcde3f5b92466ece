// The table of quantized plans the one-pass tests run: a built-in model,
// trainer and engine conventions, and which of the plan's conversions the
// colocated pull path runs in one pass (plan/one_pass.h). Checked by
// plan/one_pass_test (the planner's decision) and
// tests/dataplane/fused_pull_test (the engine's bytes on host memory).
#ifndef REFIT_TESTING_ONE_PASS_CASES_H_
#define REFIT_TESTING_ONE_PASS_CASES_H_

#include <vector>

namespace refit {
namespace testing {

struct OnePassCase {
  const char* model;
  const char* trainer;
  const char* engine;
  // All conversions in one pass, some (never one whose record cuts a
  // block), or none.
  enum { kAll, kSome, kNone } one_pass;
};

// Returns the table, in a fixed order.
const std::vector<OnePassCase>& OnePassCases();

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_ONE_PASS_CASES_H_
