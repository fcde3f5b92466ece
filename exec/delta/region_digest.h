// RegionDigest: a position-keyed digest of bytes at places in an engine
// rank's buffers, which composes by addition.
//
// The digest of a set of elements is the sum, modulo 2^64, of one term per
// element: Term(key, value), where key names the element's place (the
// engine buffer's index and the element's byte offset in it, PositionKey)
// and value is the element's bytes as a little-endian integer. So
//   - the digest of a union of disjoint regions is the sum of theirs: each
//     trainer rank digests the bytes it sends, at the engine places they
//     land, and refitd adds the parts up without anyone gathering bytes;
//   - an engine rank digests what its buffers hold at the same places, and
//     the two sums agree exactly when every element arrived where the plan
//     puts it (up to a 2^-64 chance per mismatch: this is a check against
//     corruption and lost writes, not against an adversary).
// A changed value, an element written at the wrong place and a missing
// element each change the sum.
//
// The term is a fixed function (three 64-bit multiplies), the same on the
// host and on a GPU (exec/delta/cuda), so digests computed anywhere compare.
#ifndef REFIT_EXEC_DELTA_REGION_DIGEST_H_
#define REFIT_EXEC_DELTA_REGION_DIGEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "exec/delta/digest_term.h"

namespace refit {

// PositionKey with its ranges checked: INVALID_ARGUMENT naming the buffer
// index or offset out of range.
absl::StatusOr<uint64_t> MakePositionKey(int64_t buffer, int64_t offset);

// Returns the digest of `bytes` bytes at `data`, elements of
// `element_bytes` (1, 2, 4 or 8) each, the first of which sits at
// `first_key` and each next one `element_bytes` further. `bytes` must be a
// multiple of `element_bytes` (not checked: DigestRun validates).
uint64_t DigestContiguous(const void* data, int64_t bytes, int element_bytes,
                          uint64_t first_key);

// DigestContiguous with its arguments checked: INVALID_ARGUMENT when
// element_bytes is not 1, 2, 4 or 8, bytes is negative or not a multiple of
// it, or the run passes the end of its buffer's key range.
absl::StatusOr<uint64_t> DigestRun(const void* data, int64_t bytes,
                                   int element_bytes, uint64_t first_key);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_REGION_DIGEST_H_
