// Messages: each pair's segments coalesced into messages, with each side's
// contiguity (a contiguous side needs no staging).
#ifndef REFIT_PLAN_INTERNAL_MESSAGES_H_
#define REFIT_PLAN_INTERNAL_MESSAGES_H_

#include <cstdint>
#include <vector>

#include "plan/internal/candidates.h"
#include "plan/internal/relays.h"
#include "plan/internal/segments.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// A message before it has a wave.
struct PendingMessage {
  Message m;  // wave not set yet
  int32_t stage = 0;
  int32_t seq = 0;  // index among its pair's messages
  int32_t batch = 0;  // the largest of its keys' batches (CoalesceMessages), else 0
};

// Appends to plan->segments from `keys`, in pair order and within a pair
// in message order (each message's segments contiguous), and returns the
// messages in that order. A key whose src_rank is src.world_size + e is a
// relay from engine rank e: its source record is its feeder's destination
// record (`sources`). A segment of at least `direct_min` bytes (0: never)
// that is one contiguous range of its buffer on a side is a message of its
// own; the others are coalesced in order into messages of at most `cap`
// bytes. When `segment_cand` is set, appends each segment's candidate to
// it. When `batch` is set (one entry per key: relays, the wave a key's
// bytes may go in), each message's `batch` is the largest of its keys',
// and with `split_batches` keys of different batches never share a message
// (bytes that arrive in different waves go on as they arrive).
// Reads plan->src and plan->dst. Never fails.
std::vector<PendingMessage> CoalesceMessages(const SegmentKeys& keys,
                                             const Candidates& candidates,
                                             const Sources& sources,
                                             int64_t cap, int64_t direct_min,
                                             Plan* plan,
                                             std::vector<int32_t>* segment_cand = nullptr,
                                             const std::vector<int32_t>* batch = nullptr,
                                             bool split_batches = false);

// The most bytes one rank (a src rank's sends or a dst rank's receives)
// has in segments below `direct_min` (all segments when it is 0: the bytes
// it will pack or unpack, but for doubly strided big ones), and in all
// segments. plan.src / plan.dst give the world sizes. Never fails.
struct RankBytes {
  int64_t coalesced = 0;
  int64_t all = 0;
};
RankBytes HeaviestRankBytes(const SegmentKeys& keys, const Candidates& candidates,
                            const Plan& plan, int64_t direct_min);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_MESSAGES_H_
