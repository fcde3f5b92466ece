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
  int32_t src_rank;   // the global sender (see OrderSegments)
};

struct SegmentKeys {
  // Grouped by pair, pairs ordered as OrderSegments says; within a pair by
  // (dst buffer, dst offset, candidate, split).
  std::vector<SegKey> keys;
  std::vector<Box> split_boxes;
};

// Builds the segment keys of every candidate i with sender[i] >= 0 (the
// global rank sending it: a trainer rank, or src.world_size + an engine
// rank for a relay), splitting a candidate larger than `cap` bytes along
// its outermost dim with extent > 1. Pairs are ordered by (stage of the
// trainer rank, trainer rank) first, then relaying engine ranks, then dst
// rank. Returns OK, or INVALID_ARGUMENT when one element of a tensor is
// larger than `cap`.
absl::Status OrderSegments(const Candidates& candidates,
                           const std::vector<int32_t>& sender,
                           const SideLayout& src, const SideLayout& dst,
                           int64_t cap, SegmentKeys* out);

// The same for the candidates `members` (ascending), sender[m] sending
// members[m]: work in proportion to their number.
absl::Status OrderSegmentsOf(const Candidates& candidates,
                             const std::vector<int32_t>& members,
                             const std::vector<int32_t>& sender,
                             const SideLayout& src, const SideLayout& dst,
                             int64_t cap, SegmentKeys* out);

// Returns, per candidate, its trainer rank by `choice` (an index into its
// piece's replicas; -1: none). Never fails.
std::vector<int32_t> TrainerSenders(const Candidates& candidates,
                                    const std::vector<int32_t>& choice);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_SEGMENTS_H_
