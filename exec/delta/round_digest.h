// Round digests: what a verified round compares at commit.
//
// Every byte the plan writes into an engine rank is digested twice, with
// the position-keyed digest of region_digest.h, keyed by the engine
// tensor's index and the element's byte offset in the whole tensor
// (row-major): places that every member's plan slice names alike (slices
// renumber buffers, never tensors). By the trainer rank that sends it, from its current
// bytes in engine format (all of them, also the words a delta round does
// not send), and by the engine rank, from what its buffers hold after the
// round. Each side reports sums per (engine rank, tensor); the control
// plane adds the trainers' parts and compares them with the engine's, so
// nobody gathers bytes. A mismatch names the engine rank and tensor.
#ifndef REFIT_EXEC_DELTA_ROUND_DIGEST_H_
#define REFIT_EXEC_DELTA_ROUND_DIGEST_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "exec/run_stats.h"
#include "plan/plan.h"

namespace refit {

// One contiguous run of a message's packed stream and where it lands: the
// digest of stream[offset, offset + bytes) in elements of element_bytes,
// the first keyed first_key, is part of (engine_rank, tensor)'s sum.
struct StreamDigestRun {
  int64_t offset = 0;
  int64_t bytes = 0;
  int element_bytes = 1;
  uint64_t first_key = 0;
  int32_t engine_rank = 0;
  int32_t tensor = 0;
};

// Appends the runs of message `m`'s stream (one per row of each segment,
// rows that continue each other merged) to `runs`: what a device digests
// in one pass. INVALID_ARGUMENT naming the tensor when a segment is
// outside its record or a run outside the digest's key range.
absl::Status AppendStreamDigestRuns(const Plan& plan, const Message& m,
                                    std::vector<StreamDigestRun>* runs);

// Appends the runs of `region` of a stream that holds `stream_box` (a
// segment's box, `region` inside it, both global coordinates of the
// tensor) row-major from stream offset `offset`, landing on engine rank
// `engine_rank` in record `dst_record`'s tensor: a relayed sub-region of a
// message the trainer sent. INVALID_ARGUMENT naming the tensor when the
// record is outside the plan, `region` is not inside `stream_box` or a run
// passes the digest's key range.
absl::Status AppendRegionDigestRuns(const Plan& plan, int32_t engine_rank, int32_t dst_record,
                                    const Box& stream_box, int64_t offset, const Box& region,
                                    std::vector<StreamDigestRun>* runs);

// Adds `b` into `a`.
void AddDigests(const DigestSums& b, DigestSums* a);

// Adds the digest of message `m`'s packed stream (`stream`, m.bytes bytes,
// host memory) at the engine tensor places it lands to `sums` (the
// sender's part).
// INVALID_ARGUMENT naming the tensor when a segment is outside its record.
absl::Status DigestMessageStream(const Plan& plan, const Message& m,
                                 const char* stream, DigestSums* sums);

// Adds the digest of what engine buffers (`buffers`, the engine rank's,
// host memory, indexed like the plan's engine buffers) hold at the places
// message `m` writes to `sums`: each segment is read back out of its record
// and digested at its tensor places.
absl::Status DigestMessageTarget(const Plan& plan, const Message& m,
                                 const std::vector<char*>& buffers,
                                 DigestSums* sums);

// Compares the sum of the trainers' parts with the engines' sums: OK when
// every (engine rank, tensor) agrees, else DATA_LOSS naming the first
// engine rank and tensor that differs (or that only one side reported).
absl::Status CompareDigests(const Plan& plan, const DigestSums& trainers,
                            const DigestSums& engines);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_ROUND_DIGEST_H_
