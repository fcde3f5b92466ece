// Byte limits the planner derives from its options.
#ifndef REFIT_PLAN_INTERNAL_BUDGETS_H_
#define REFIT_PLAN_INTERNAL_BUDGETS_H_

#include <algorithm>
#include <cstdint>

#include "plan/delta_lane.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// Returns the staging bytes one rank may use per lane (at least 1):
// LaneShare (plan/delta_lane.h). Never fails.
inline int64_t LaneBudget(const PlannerOptions& options) { return LaneShare(options); }

// Returns the most bytes one message carries: min(max_message_bytes, the
// per-lane budget), or the per-lane budget when max_message_bytes is 0.
inline int64_t MessageCap(const PlannerOptions& options) {
  const int64_t lane_budget = LaneBudget(options);
  return options.max_message_bytes > 0
             ? std::min(options.max_message_bytes, lane_budget)
             : lane_budget;
}

// Returns the most bytes one rank sends plus receives in one wave:
// max_wave_bytes, or the per-lane budget when that is 0.
inline int64_t WaveCap(const PlannerOptions& options) {
  return options.max_wave_bytes > 0 ? options.max_wave_bytes
                                     : LaneBudget(options);
}

// Sets *cap (a byte cap, 0: none) to at most `to` (> 0). Never fails.
inline void LowerCap(int64_t* cap, int64_t to) { *cap = *cap > 0 ? std::min(*cap, to) : to; }

// Lanes for a plan of many small or strided pieces: when options allow it
// (choose_lanes) and ask for fewer, a plan whose heaviest rank stages
// (`staged`: the most bytes of one rank's segments below direct_min_bytes,
// sent or received) at least 4 per-lane budgets and 256 MiB, and at least
// half of that heaviest rank's bytes (`all`), gets kStagedLanes lanes
// (each at least 16 MiB of the staging budget): with two, a lane's pack
// and unpack cannot hide behind the other lane's transfer; with four they
// do (refit_gpu_bench small, 2xH200: 0.94 of raw NCCL against 0.87).
inline constexpr int32_t kStagedLanes = 4;
inline int32_t ChooseLanes(const PlannerOptions& options, int64_t staged, int64_t all) {
  if (!options.choose_lanes || options.num_lanes >= kStagedLanes ||
      staged < std::max<int64_t>(4 * LaneBudget(options), int64_t{256} << 20) ||
      2 * staged < all || options.staging_budget_bytes / kStagedLanes < (int64_t{16} << 20)) {
    return options.num_lanes;
  }
  return kStagedLanes;
}

// Relay pipelining: a relay forwards a wave's bytes in the next wave, so a
// chain of D hops ends D waves after the trainer's last. Waves of at most
// the heaviest engine rank's bytes over kRelayWavesPerHop * D keep that
// tail within about 1 / kRelayWavesPerHop of the round. A relay rank
// unpacks what it receives and packs what it forwards in one wave, so a
// wave carries at most half a lane budget each way; at least
// kMinRelayWaveBytes (below it, per-wave costs outweigh the tail).
// When the depth bounds the wave below that, messages are a quarter of a
// wave (kRelayMessagesPerWave), so that next-fit fills waves evenly: a
// chain moves at the pace of its fullest wave.
inline constexpr int64_t kRelayWavesPerHop = 4;
inline constexpr int64_t kRelayMessagesPerWave = 4;
inline constexpr int64_t kMinRelayWaveBytes = int64_t{32} << 10;

// Sets options->max_wave_bytes and max_message_bytes for a relay plan
// whose heaviest engine rank receives `max_rank_bytes` and whose chains
// are `depth` hops deep (> 0), by the rule above; a smaller value already
// set stays. Options must be valid (ValidateOptions). Never fails.
inline void SetRelayCaps(int64_t max_rank_bytes, int32_t depth, PlannerOptions* options) {
  const int64_t half_lane = std::max<int64_t>(1, LaneBudget(*options) / 2);
  int64_t wave = max_rank_bytes / (kRelayWavesPerHop * std::max(1, depth));
  wave = std::min(half_lane, std::max(kMinRelayWaveBytes, wave));
  const int64_t message =
      wave < half_lane ? std::max<int64_t>(1, wave / kRelayMessagesPerWave) : wave;
  LowerCap(&options->max_wave_bytes, wave);
  LowerCap(&options->max_message_bytes, message);
}

// Sets options->max_wave_bytes and max_message_bytes to at most half a
// lane budget when options->delta (PlannerOptions::delta); a smaller value
// already set stays. Options must be valid (ValidateOptions). Never fails.
inline void SetDeltaCaps(PlannerOptions* options) {
  if (!options->delta) return;
  const int64_t half_lane = std::max<int64_t>(1, LaneBudget(*options) / 2);
  LowerCap(&options->max_wave_bytes, half_lane);
  LowerCap(&options->max_message_bytes, half_lane);
}

// Sets options->max_wave_bytes and max_message_bytes to at most
// DeltaLaneRoom(*options) - QuantizeRoom(*options) when `converts` (the plan
// has conversions: a delta round's trainer rank packs the messages that
// read converted values and quantizes their rows in the room its wave's
// packed bytes leave, plan/delta_lane.h); a smaller value already set stays.
// Options must be valid (ValidateOptions). Never fails.
inline void SetQuantizeCaps(bool converts, PlannerOptions* options) {
  if (!converts) return;
  const int64_t cap =
      std::max<int64_t>(1, DeltaLaneRoom(*options) - QuantizeRoom(*options));
  LowerCap(&options->max_wave_bytes, cap);
  LowerCap(&options->max_message_bytes, cap);
}

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_BUDGETS_H_
