// Segments: each candidate with its chosen replica, split at the message
// cap, in the order messages are coalesced.
#ifndef REFIT_PLAN_INTERNAL_SEGMENTS_H_
#define REFIT_PLAN_INTERNAL_SEGMENTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "layout/box.h"
#include "layout/layout.h"
#include "plan/internal/candidates.h"

namespace refit {
namespace internal_plan {

// A segment is candidate `cand` (its intersection box), or, when the
// candidate was split at the cap, split_boxes[split].
struct SegKey {
  int64_t dst_start;  // byte offset of the box origin in dst_buffer
  int64_t bytes;
  int32_t dst_buffer;
  int32_t cand;
  int32_t split;      // -1: the whole candidate
  int32_t src_rank;
};

struct SegmentKeys {
  // Grouped by pair, pairs ordered by (stage of the src rank, src rank, dst
  // rank); within a pair by (dst buffer, dst offset, candidate, split).
  std::vector<SegKey> keys;
  std::vector<Box> split_boxes;
};

// Builds the segment keys of every candidate (`choice`: its replica, from
// BalanceReplicas), splitting a candidate larger than `cap` bytes along its
// outermost dim with extent > 1. Returns OK, or INVALID_ARGUMENT when one
// element of a tensor is larger than `cap`.
absl::Status OrderSegments(const Candidates& candidates,
                           const std::vector<int32_t>& choice,
                           const SideLayout& src, const SideLayout& dst,
                           int64_t cap, SegmentKeys* out);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_SEGMENTS_H_
