// RegionDigest: a position-keyed digest of bytes at places in an engine
// rank's buffers, which composes by addition.
//
// The digest of a set of bytes is a sum, modulo 2^64, linear in the bytes:
// each byte adds its value times a weight that depends on its place (the
// key: the engine tensor's or buffer's index and the byte's offset in it,
// PositionKey), an odd mix of the key's 8-byte word times a power of two
// below 2^32 (digest_term.h). So
//   - the digest of a union of disjoint regions is the sum of theirs, cut
//     anywhere, even inside an element or a word: each trainer rank digests
//     the bytes it sends, at the engine places they land, and refitd adds
//     the parts up without anyone gathering bytes;
//   - an engine rank digests what its buffers hold at the same places, and
//     the two sums agree when every byte arrived where the plan puts it. A
//     single wrong byte always changes the sum; several wrong bytes cancel
//     with a chance of about 2^-32 or less (this is a check against
//     corruption and lost writes, not against an adversary).
// A word's term costs two 64-bit multiplies of the mix, one for its 32-bit
// halves and one for the weight: a GPU digests at memory speed.
//
// The terms are fixed functions, the same on the host and on a GPU
// (exec/delta/cuda), so digests computed anywhere compare.
#ifndef REFIT_EXEC_DELTA_REGION_DIGEST_H_
#define REFIT_EXEC_DELTA_REGION_DIGEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "exec/delta/digest_term.h"

namespace refit {

// PositionKey with its ranges checked: INVALID_ARGUMENT naming the buffer
// index or offset out of range.
absl::StatusOr<uint64_t> MakePositionKey(int64_t buffer, int64_t offset);

// Returns the digest of `bytes` bytes at `data`, the first at key
// `first_key` and each next one a key further. `bytes` is a whole number of
// elements of `element_bytes` (1, 2, 4 or 8; not checked: DigestRun
// validates); the sum does not depend on it.
uint64_t DigestContiguous(const void* data, int64_t bytes, int element_bytes,
                          uint64_t first_key);

// DigestContiguous with its arguments checked: INVALID_ARGUMENT when
// element_bytes is not 1, 2, 4 or 8, bytes is negative or not a multiple of
// it, or the run passes the end of its buffer's key range.
absl::StatusOr<uint64_t> DigestRun(const void* data, int64_t bytes,
                                   int element_bytes, uint64_t first_key);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_REGION_DIGEST_H_
