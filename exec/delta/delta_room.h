// How a delta batch's encodings share the plan's staging budget
// (PlannerOptions::staging_budget_bytes): the arithmetic both sides of a
// pair do alike, from what both hold (the plan's options, the pair's
// messages), so that a sender never sends a receiver more encoded bytes
// than the receiver has room for.
//
// Each lane of a rank holds one batch at a time in its lane room
// (plan/delta_lane.h: DeltaLaneRoom): the batch's packed messages
// (staging), then its encoded payloads. A plan without relays gives each
// lane the per-lane share (budget / lanes); a plan with relays half of
// it, the other half of the budget holding the encoded payloads a relay
// keeps until it forwards them. A batch's bound
// bounds the bytes a receiver moves in it (sent plus received), from what
// both sides of a pair hold (the whole plan's figures, plan/wave_bytes.h,
// and the pair's messages: PairBound). A
// sender (a trainer rank, or a relay repeating an encoded payload) gives a
// receiver at most PairCodedCap encoded bytes in a batch: the receiver's
// room in proportion to the pair's share of the bound, less the staging
// the receiver needs for the pair's packed messages. Summed over the
// receiver's peers that stays within its lane room whatever its other
// peers send; what does not fit travels dense.
#ifndef REFIT_EXEC_DELTA_DELTA_ROOM_H_
#define REFIT_EXEC_DELTA_DELTA_ROOM_H_

#include <cstdint>

#include "plan/delta_lane.h"  // DeltaLaneRoom, LaneShare
#include "plan/plan.h"

namespace refit {

// Returns the bound of a batch, as every rank of a pair computes it: the
// most bytes the receiver moves in the batch (sent plus received). A batch
// of several plan waves within one window: `window`. One plan wave: the
// planner keeps each rank's bytes in a wave within max_wave_bytes (0: the
// per-lane share), a message larger than that alone in its wave, so the
// pair's bytes when one of its messages (`pair_largest`) is larger, else
// at most that cap and the wave's bytes (`wave_bytes`, every rank's).
// Never fails.
int64_t PairBound(const PlannerOptions& options, int64_t window, int64_t wave_bytes,
                  int64_t pair_bytes, int64_t pair_largest);

// Returns the staging one packed message of `bytes` takes when packed
// tightly: its bytes rounded up to 8 (a codec word is at most 8 bytes).
inline int64_t TightStagingBytes(int64_t bytes) { return (bytes + 7) / 8 * 8; }

// Returns the encoded bytes (each payload rounded up to 16) a sender may
// send one receiver in a batch whose bound is `bound` and whose lane room
// is `room`, for the pair's messages of `pair_bytes`, of which the
// receiver packs `receiver_staging` bytes (TightStagingBytes each):
// (room - 16) * pair_bytes / bound - receiver_staging, at least 0; 0 when
// the bound is not within (0, room]; room - 16 - receiver_staging when the
// bound is the pair's bytes (the pair alone in the batch). Summed over a receiver's peers, their
// packed bytes and caps stay within the room (each message's bytes a
// multiple of 8). Never fails.
int64_t PairCodedCap(int64_t room, int64_t bound, int64_t pair_bytes,
                     int64_t receiver_staging);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DELTA_ROOM_H_
