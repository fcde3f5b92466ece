// Moving a logical tensor's bytes into and out of one rank's buffers,
// record by record: builds a side's local buffers from a checkpoint (refit
// simulate, tests) and reads buffers back into checkpoint tensors.
//
// `full` is a tensor's bytes in row-major order of its global shape; for a
// stacked tensor it may instead be one member (member >= 0: the HF tensor of
// expert `member`, shape = the global shape without dim 0).
#ifndef REFIT_MAPPING_SCATTER_H_
#define REFIT_MAPPING_SCATTER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "layout/layout.h"

namespace refit {

// Copies the elements of record `r` (of `side`) that come from `full`
// (member < 0: the whole tensor; else member `member` of a stacked tensor,
// skipped if the record holds no part of it) into `buffer`, the bytes of
// r's buffer. INVALID_ARGUMENT naming the tensor if `full` or `buffer` has
// the wrong size.
absl::Status ScatterToRecord(const SideLayout& side, const Record& r,
                             int64_t member, absl::Span<const uint8_t> full,
                             absl::Span<uint8_t> buffer);

// The inverse: copies the record's elements from `buffer` into `full`.
absl::Status GatherFromRecord(const SideLayout& side, const Record& r,
                              int64_t member, absl::Span<const uint8_t> buffer,
                              absl::Span<uint8_t> full);

}  // namespace refit

#endif  // REFIT_MAPPING_SCATTER_H_
