// The planner's coverage check of the destination layout.
#ifndef REFIT_PLAN_INTERNAL_COVERAGE_H_
#define REFIT_PLAN_INTERNAL_COVERAGE_H_

#include <string>
#include <vector>

#include "layout/layout.h"

namespace refit {
namespace internal_plan {

// Destination coverage: in every buffer, the records' bytes must not
// overlap and, with the declared padding, must cover it. Buffers whose
// byte layout (size, padding, and every record part's offset, element size
// and dim maps) equals one already checked and found fine are skipped:
// the check depends on nothing else, and replicas and TP peers repeat the
// same few layouts thousands of times; so is a buffer one record fills
// contiguously. Appends one line per problem to *errors (overlapping
// records, unsourced bytes), naming buffer and rank. `dst` must be valid.
void CheckCoverage(const SideLayout& dst, std::vector<std::string>* errors);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_COVERAGE_H_
