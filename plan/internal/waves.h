// Waves: messages scheduled into waves and lanes under the staging
// budget, then emitted in wave order.
#ifndef REFIT_PLAN_INTERNAL_WAVES_H_
#define REFIT_PLAN_INTERNAL_WAVES_H_

#include <cstdint>
#include <vector>

#include "plan/internal/messages.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Places the messages next-fit into waves of their stage, so that per
// wave each rank's staged bytes are <= LaneBudget(options) and all its
// bytes <= WaveCap(options) (a bigger message alone in a wave), keeping
// each pair's order; then interleaves the stages' waves (wave k of each
// stage, in stage order) and gives each wave its lane (see planner.h).
// Sets every message's m.wave and appends the waves to *waves (no
// messages yet). `src_world`/`dst_world`: the world sizes. Messages are
// placed in (stage, seq, src rank, dst rank) order; that is linear when
// `messages` come in pair order (CoalesceMessages), sorted otherwise.
// Never fails.
void ScheduleWaves(const PlannerOptions& options,
                                    int32_t src_world, int32_t dst_world,
                                    std::vector<PendingMessage>* messages,
                                    std::vector<Wave>* waves);

// Per engine rank and wave: staging (shared by what it packs and unpacks)
// and the bytes it receives and sends, counted apart (full duplex).
struct RankWaveUse {
  int64_t staged = 0;
  int64_t in = 0;
  int64_t out = 0;
};
// [engine rank][wave]; a rank's row is as long as its last used wave, or
// longer (unused waves are zero).
using RankWaveTable = std::vector<std::vector<RankWaveUse>>;

// Returns the table of what `placed` (messages with their waves set) uses
// on each of the dst_world engine ranks; each row covers `num_waves` waves
// at least. Never fails.
RankWaveTable RankWaveUseOf(int32_t dst_world, int32_t num_waves,
                            const std::vector<PendingMessage>& placed);

// Places relay messages (m.relay; src_rank an engine rank) into waves
// after the messages already counted in `use` (see RankWaveUseOf; the
// placed relays are added to it): relay i at the first wave at or after
// ready[i] and its pair's
// previous relay in which both engine ranks' staged bytes (a relay sender
// packs, a receiver unpacks) fit the lane budget and the sender's sent
// bytes and the receiver's received bytes each fit the wave cap (full
// duplex: a rank may receive a wave's worth and forward one in the same
// wave; with options.delta a rank's sent plus received bytes fit the wave
// cap and its staged bytes half the lane budget, a delta relay's lane room),
// appending waves after the last (lane: wave index % num_lanes, stage 0)
// when none has room. Relays are placed in (ready, seq, src, dst) order;
// a pair's ready waves must not decrease with seq. Sets every relay's
// m.wave. Never fails.
void ScheduleRelayWaves(const PlannerOptions& options, int32_t dst_world,
                        const std::vector<int32_t>& ready,
                        std::vector<PendingMessage>* relays, RankWaveTable* use,
                        std::vector<Wave>* waves);

// Writes plan->messages in (wave, relay, src rank, dst rank, seq) order and each
// wave's first_message and num_messages; m.wave must be set
// (ScheduleWaves). Linear when `messages` come in pair order
// (CoalesceMessages), sorted otherwise. Never fails.
void EmitMessages(const std::vector<PendingMessage>& messages, Plan* plan);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_WAVES_H_
