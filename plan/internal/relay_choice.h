// The state ChooseRelaySources (relays.h) works on: the units in
// placement order, what its passes read, and a choice of sources under
// way. Only relays.cc and relay_rebalance.cc use it.
#ifndef REFIT_PLAN_INTERNAL_RELAY_CHOICE_H_
#define REFIT_PLAN_INTERNAL_RELAY_CHOICE_H_

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "plan/cost.h"
#include "plan/internal/candidates.h"
#include "plan/internal/relay_loads.h"

namespace refit {
namespace internal_plan {

// A unit's bytes, first dst record and replicas' trainer ranks.
struct UnitInfo {
  int64_t bytes;
  int32_t dst_record;  // of its first member
  absl::Span<const int32_t> ranks;
};

// Units' (-bytes, first dst record, unit) in placement order.
using Order = std::vector<std::tuple<int64_t, int32_t, int32_t>>;

// Units renumbered by their place in ChooseRelaySources' `order` (unit t
// is order[t]'s), their members side by side in that order, so that its
// loops walk the per-member arrays in sequence.
struct PlacedUnits {
  Units units;
  Containers containers;  // by the new numbers
  std::vector<UnitInfo> info;  // ranks: spans of unit_ranks
  std::vector<int32_t> rank_at;  // per member: its dst rank
  std::vector<int32_t> unit_ranks;  // the units' replica ranks, side by side
  std::vector<int32_t> unit_of;  // per new number: the GroupUnits number
  std::vector<int32_t> place;  // per GroupUnits number: the new one
};

// What the passes read: the time model, the units in placement order and
// where engine ranks share the trainer's hosts.
struct Setting {
  const CostModel& cost;
  const PlacedUnits& placed;
  const Order& order;  // units by the new numbers
  // The uncontained units' range of `order`, then the contained ones'.
  std::pair<size_t, size_t> tiers[2];
  double bound;  // the relay-aware bound
  const std::vector<char>& trainer_host;  // per engine rank (OnTrainerHosts)
  int32_t dst_world;  // engine ranks
  bool shared_hosts;  // some engine rank shares a trainer rank's host
  bool anticipate;    // ChooseRelaySources' argument
};

// A choice of sources under way. Per member (placed order): its replica
// (-1: none or relayed), its feeder member (-1: none), its hops after the
// trainer and whether it is fed; per unit whether a member of it is fed on
// its own GPU; the ranks' loads, the floor options are measured against
// and the deepest relay so far.
struct Choice {
  // With `anticipate` (ReserveBest) it keeps per member its reserved class.
  Choice(const CostModel& cost, int32_t src_world, int32_t dst_world, size_t members,
         int32_t num_units, bool anticipate)
      : loads(cost, src_world, dst_world),
        choice_at(members, -1),
        feeder_at(members, -1),
        depth_at(members, 0),
        fed(members, 0),
        unit_fed(num_units, 0),
        best_at(anticipate ? members : 0, -1) {}

  // Member q's reserved class, -1 when none.
  int Reserved(int32_t q) const { return best_at.empty() || fed[q] ? -1 : best_at[q]; }

  // Takes member q's reserved bytes (ReserveBest) out of its rank's load,
  // as it is fed over its link (once per feed).
  void Release(const std::vector<int32_t>& rank_at, int32_t q, int64_t bytes) {
    if (best_at.empty()) return;
    loads.Unreserve(rank_at[q], static_cast<LinkClass>(best_at[q]), bytes);
  }

  // Feeds member q `bytes` from replica k of `ranks` (f < 0) or from member
  // f; `rank_at`: per member its dst rank.
  void Feed(const std::vector<int32_t>& rank_at, int32_t q, absl::Span<const int32_t> ranks,
            int32_t k, int32_t f, int64_t bytes) {
    Release(rank_at, q, bytes);
    if (f < 0) {
      choice_at[q] = k;
      loads.AddDirect(ranks[k], rank_at[q], bytes);
      return;
    }
    feeder_at[q] = f;
    depth_at[q] = static_cast<int16_t>(depth_at[f] + 1);
    max_depth = std::max<int32_t>(max_depth, depth_at[q]);
    loads.AddRelay(rank_at[f], rank_at[q], bytes);
  }

  Loads loads;
  std::vector<int32_t> choice_at, feeder_at;
  std::vector<int16_t> depth_at;
  std::vector<char> fed;
  std::vector<char> unit_fed;
  // Per member, the class ReserveBest reserved its bytes at, where they
  // count while it is not fed; empty without anticipate.
  std::vector<int8_t> best_at;
  double floor = 0;
  int32_t max_depth = 0;
};

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAY_CHOICE_H_
