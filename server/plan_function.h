// The plan function refitd calls for a complete membership, and what it
// returns. refitd's production one is DefaultPlanFunction (default_plan.h).
#ifndef REFIT_SERVER_PLAN_FUNCTION_H_
#define REFIT_SERVER_PLAN_FUNCTION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit_service.pb.h"

namespace refit {

// What one member's plan slice moves, which bounds what its round reports
// may say (Coordinator::Report): a trainer rank's sends, an engine rank's
// receives.
struct SliceBounds {
  int32_t engine_rank = -1;  // the plan's engine rank (engine members; -1: trainers)
  int64_t bytes = 0;         // the slice's message bytes
  int64_t messages = 0;      // the slice's messages
  // The (engine rank, engine tensor) places the slice writes, ascending: the
  // only digest parts (DigestPart) the member may report.
  std::vector<std::pair<int32_t, int32_t>> digest_keys;
};

// What the plan function returns: one slice per member, in the order of the
// registrations it was given, plus the data-plane lane count.
struct BuiltPlan {
  int num_lanes = 1;
  // The plan's own fingerprint (PlanFingerprint), which members and
  // `refit status` see; empty: refitd reports the registrations'
  // fingerprint instead.
  std::string fingerprint;
  // Serialized PlanProtos (SerializeAsString), one per member.
  std::vector<std::string> trainer_slices;  // [trainer rank]
  std::vector<std::string> engine_slices;   // [engine member, input order]
  // The (trainer rank, engine global rank) pairs that exchange messages
  // (engine global rank = trainer count + engine member index), and with
  // relays (engine global rank, engine global rank) pairs, ascending;
  // empty: every pair may. refitd chooses each pair's data plane from them.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  // The plan's bytes (each message once) and the planner's predicted
  // seconds of a round (PlanStats); 0 when the plan function does not say.
  int64_t bytes = 0;
  double predicted_seconds = 0;
  // Members on host memory (no GPU): whether delta rounds (refitd --delta)
  // run dense because the host codec loses to the links, and the line that
  // says why either way (HostDeltaChoice::reason); false and empty for
  // other memberships and plan functions that do not say.
  bool host_delta_dense = false;
  std::string host_delta_note;
  // Per slice, what it moves (SliceBounds), parallel to trainer_slices and
  // engine_slices; empty: the plan function does not say, and refitd checks
  // reports only for overflow.
  std::vector<SliceBounds> trainer_bounds;
  std::vector<SliceBounds> engine_bounds;

  // Filled by refitd (RunPlanFunction), not by the plan function: on the
  // colocated pull path, the host index per global rank (empty otherwise),
  // and the members on the network transport and pair counts by data plane.
  std::vector<int32_t> host_of_member;
  std::vector<int32_t> network_members;
  int64_t pull_pairs = 0;
  int64_t network_pairs = 0;
};

// Builds the plan for a complete membership. `trainer` is ordered by rank;
// `engine` by (engine id, rank). An error (e.g. the planner's
// INVALID_ARGUMENT) is reported to every member as the plan outcome.
using PlanFunction = std::function<absl::StatusOr<BuiltPlan>(
    const std::vector<v1::Registration>& trainer,
    const std::vector<v1::Registration>& engine)>;

}  // namespace refit

#endif  // REFIT_SERVER_PLAN_FUNCTION_H_
