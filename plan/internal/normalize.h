// The planner's normalization: per-index records merged into indexed ones.
#ifndef REFIT_PLAN_INTERNAL_NORMALIZE_H_
#define REFIT_PLAN_INTERNAL_NORMALIZE_H_

#include <vector>

#include "layout/layout.h"

namespace refit {
namespace internal_plan {

// Merges records that hold one dim-0 index each of a tensor on one rank in
// per-index buffers (Megatron's TEGroupedMLP: one parameter per local
// expert) into indexed records (Record::buffer_step). Exact: a merged
// record addresses the same bytes as its parts. Input order is kept
// otherwise. Records must be valid. Never fails.
void MergeIndexedRecords(std::vector<Record>* records);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_NORMALIZE_H_
