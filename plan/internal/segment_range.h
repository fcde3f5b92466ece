// Whether a part of a record is one contiguous byte range of one buffer:
// the coverage check and message coalescing both ask.
#ifndef REFIT_PLAN_INTERNAL_SEGMENT_RANGE_H_
#define REFIT_PLAN_INTERNAL_SEGMENT_RANGE_H_

#include <cstdint>
#include <optional>

#include "layout/box.h"
#include "layout/layout.h"

namespace refit {
namespace internal_plan {

// Returns true, and sets *buffer and *range, if the part `sub` of record r
// (element size es) is one contiguous byte range of one buffer (row-major
// order of sub); false otherwise.
inline bool SegmentRange(const Record& r, int64_t es, const Box& sub,
                         int32_t* buffer, ByteRange* range) {
  std::optional<ByteRange> c = ContiguousByteRange(r, es, sub);
  if (!c) return false;
  *buffer = RecordBuffer(r, sub.rank() > 0 ? sub.origin(0) - r.box.origin(0) : 0);
  *range = *c;
  return true;
}

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_SEGMENT_RANGE_H_
