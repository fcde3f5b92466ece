// Source choice with relays (see relays.h): same-GPU replicas, then
// chains (each unit's members in chain order, each from the trainer side
// or the member before), or where those are slow, trees (one root per
// unit from the trainer side, then every other candidate from the trainer
// side or from an engine rank of its unit or of a container that holds
// it).
#include "plan/internal/relays.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "plan/cost.h"
#include "plan/internal/bound.h"
#include "plan/internal/relay_choice.h"
#include "plan/internal/relay_loads.h"
#include "plan/internal/relay_rebalance.h"
#include "plan/internal/trainer_hosts.h"

namespace refit {
namespace internal_plan {
namespace {

// Renumbers units u (GroupUnits' numbers, with their containers, infos and
// members' dst ranks) by their place in *order, whose third fields become
// the new numbers.
PlacedUnits PlaceUnits(Units by_unit, Containers containers_by_unit,
                       std::vector<UnitInfo> info_by_unit, std::vector<int32_t> rank_by_unit,
                       Order* order) {
  const int32_t num_units = by_unit.size();
  PlacedUnits p;
  p.unit_of.resize(num_units);
  p.place.resize(num_units);
  p.info.resize(num_units);
  size_t all_ranks = 0;
  for (const UnitInfo& i : info_by_unit) all_ranks += i.ranks.size();
  p.unit_ranks.reserve(all_ranks);  // no reallocation: the spans stay valid
  p.units.first.assign(num_units + 1, 0);
  p.units.members.reserve(by_unit.members.size());
  p.rank_at.reserve(by_unit.members.size());
  for (int32_t t = 0; t < num_units; ++t) {
    const int32_t u = std::get<2>((*order)[t]);
    p.unit_of[t] = u;
    p.place[u] = t;
    std::get<2>((*order)[t]) = t;
    p.info[t] = info_by_unit[u];
    p.info[t].ranks = absl::Span<const int32_t>(p.unit_ranks.data() + p.unit_ranks.size(),
                                                info_by_unit[u].ranks.size());
    p.unit_ranks.insert(p.unit_ranks.end(), info_by_unit[u].ranks.begin(),
                        info_by_unit[u].ranks.end());
    for (int32_t q = by_unit.first[u]; q < by_unit.first[u + 1]; ++q) {
      p.units.members.push_back(by_unit.members[q]);
      p.rank_at.push_back(rank_by_unit[q]);
    }
    p.units.first[t + 1] = static_cast<int32_t>(p.units.members.size());
  }
  p.containers.first.assign(num_units + 1, 0);
  p.containers.units.reserve(containers_by_unit.units.size());
  for (int32_t t = 0; t < num_units; ++t) {
    const int32_t u = p.unit_of[t];
    for (int32_t k = containers_by_unit.first[u]; k < containers_by_unit.first[u + 1]; ++k) {
      p.containers.units.push_back(p.place[containers_by_unit.units[k]]);
    }
    p.containers.first[t + 1] = static_cast<int32_t>(p.containers.units.size());
  }
  return p;
}

// Returns the units (GroupUnits' numbers; `containers` and `info` by
// those) in placement order: by tier (uncontained, then contained: their
// containers' holders are fed first), bytes descending (a container before
// what it contains), then first dst record. *tier_at: where the contained
// units start.
Order PlacementOrder(const Containers& containers, const std::vector<UnitInfo>& info,
                     size_t* tier_at) {
  const int32_t num_units = info.size();
  // Each unit's (-bytes, dst record, unit) as one 128-bit key in the same
  // order (bytes, records and units are not negative): sorting the keys
  // is sorting the tuples, with cheaper compares and moves.
  using Key = unsigned __int128;
  std::vector<Key> keys;
  keys.reserve(num_units);
  for (int contained = 0; contained < 2; ++contained) {
    for (int32_t u = 0; u < num_units; ++u) {
      if (containers.Contained(u) != (contained == 1)) continue;
      const uint64_t bytes_desc = ~static_cast<uint64_t>(info[u].bytes);
      const uint64_t record_unit = static_cast<uint64_t>(static_cast<uint32_t>(info[u].dst_record))
                                       << 32 |
                                   static_cast<uint32_t>(u);
      keys.push_back(static_cast<Key>(bytes_desc) << 64 | record_unit);
    }
    if (contained == 0) *tier_at = keys.size();
  }
  std::sort(keys.begin(), keys.begin() + *tier_at);
  std::sort(keys.begin() + *tier_at, keys.end());
  Order order;
  order.reserve(num_units);
  for (const Key k : keys) {
    const int32_t u = static_cast<int32_t>(static_cast<uint32_t>(k));
    order.emplace_back(-info[u].bytes, info[u].dst_record, u);
  }
  return order;
}

// Offers *best each replica of `ranks` as the sender of transfer x (the
// first one wins outright when `have_best` is false); returns the index of
// the replica that wins, or -1 when *best stays. Replicas over one link
// class offer options that differ only in the sender's time, which orders
// them (Option's order: the larger time, then the sender's); so per class
// the least loaded replica (the first on a tie) is its only contender, and
// the contenders are offered in replica order: the same winner as offering
// every replica.
int32_t FromReplicas(const Choice& c, absl::Span<const int32_t> ranks, Transfer* x,
                     bool have_best, Option* best) {
  int32_t contender[kNumLinkClasses] = {-1, -1, -1};
  double send[kNumLinkClasses] = {};
  for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
    const LinkClass lc = c.loads.DirectClass(ranks[k], *x);
    const double t = c.loads.SendTime(ranks[k], lc, *x);
    const int i = static_cast<int>(lc);
    if (contender[i] < 0 || t < send[i]) {
      contender[i] = k;
      send[i] = t;
    }
  }
  // The contenders (their classes) in replica order.
  int classes[kNumLinkClasses];
  int n = 0;
  for (int i = 0; i < kNumLinkClasses; ++i) {
    if (contender[i] < 0) continue;
    int at = n++;
    for (; at > 0 && contender[classes[at - 1]] > contender[i]; --at) classes[at] = classes[at - 1];
    classes[at] = i;
  }
  int32_t best_k = -1;
  for (int j = 0; j < n; ++j) {
    const int i = classes[j];
    const Option o = c.loads.Direct(static_cast<LinkClass>(i), send[i], x, c.floor);
    if ((!have_best && best_k < 0) || o < *best) {
      *best = o;
      best_k = contender[i];
    }
  }
  return best_k;
}

// Offers *best the fed members of unit u's containers (on other engine
// ranks than x's, under `depth_limit` hops) as feeders of transfer x: sets
// *best_h to the member that wins (else leaves both).
void FromContainers(const Setting& s, const Choice& c, int32_t u, Transfer* x,
                    int32_t depth_limit, Option* best, int32_t* best_h) {
  const Units& units = s.placed.units;
  const Containers& containers = s.placed.containers;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  for (int32_t k = containers.first[u]; k < containers.first[u + 1]; ++k) {
    const int32_t cu = containers.units[k];
    for (int32_t h = units.first[cu]; h < units.first[cu + 1]; ++h) {
      if (!c.fed[h] || rank_at[h] == x->dst() || c.depth_at[h] >= depth_limit) continue;
      const Option o = c.loads.Relay(rank_at[h], x, c.depth_at[h] + 1, c.floor);
      if (o < *best) {
        *best = o;
        *best_h = h;
      }
    }
  }
}

// Step 1 (see relays.h): every member with a replica on its dst rank's GPU
// takes the least loaded one of those (units in GroupUnits' order); then
// the floor is the bound or the slowest rank, the larger.
void FeedSameGpu(const Setting& s, Choice* c) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  const int32_t num_units = units.size();
  for (int32_t by = 0; by < num_units && s.shared_hosts; ++by) {
    const int32_t u = s.placed.place[by];
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    for (int32_t q = units.first[u]; q < units.first[u + 1]; ++q) {
      int32_t best = -1;
      for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
        if (s.cost.ClassOf(ranks[k], rank_at[q]) != LinkClass::kSameGpu) continue;
        if (best < 0 || c->loads.SrcTime(ranks[k]) < c->loads.SrcTime(ranks[best])) best = k;
      }
      if (best < 0) continue;
      c->choice_at[q] = best;
      c->fed[q] = 1;
      c->unit_fed[u] = 1;
      c->Release(rank_at, q, s.placed.info[u].bytes);
      c->loads.AddDirect(ranks[best], rank_at[q], s.placed.info[u].bytes);
    }
  }
  c->floor = std::max(s.bound, c->loads.Slowest());
}

// Engine rank r's host for chain order: its host, or under unknown
// placement the rank itself.
int32_t ChainHost(const CostModel& cost, int32_t r) {
  return cost.placement_known() ? cost.EngineHost(r) : r;
}

// Returns the members in chain order, unit by unit (each unit's range of
// the placed members): members fed by step 1 (`fed`) first where hosts are
// shared, then those on the trainer's hosts, then the others; by host, on
// a host by rank turned by the unit's GroupUnits number (so that units
// enter a host through each of its ranks in turn).
std::vector<int32_t> ChainOrder(const Setting& s, const std::vector<char>& fed) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  // Per engine rank its chain host and its place in (host, rank) order,
  // so that a member's key (group, host, rank) is one integer.
  const int32_t world = s.dst_world;
  std::vector<int32_t> host(world), pos(world);
  std::vector<std::pair<int32_t, int32_t>> by_host(world);
  for (int32_t r = 0; r < world; ++r) {
    host[r] = ChainHost(s.cost, r);
    by_host[r] = {host[r], r};
  }
  std::sort(by_host.begin(), by_host.end());
  for (int32_t i = 0; i < world; ++i) pos[by_host[i].second] = i;
  auto chain_key = [&](int32_t x) {
    const int32_t r = rank_at[x];
    const int64_t group = !s.shared_hosts ? 0 : fed[x] ? 0 : s.trainer_host[r] ? 1 : 2;
    return group * world + pos[r];
  };
  auto before_in_chain = [&](int32_t x, int32_t y) { return chain_key(x) < chain_key(y); };
  std::vector<int32_t> chain(units.members.size());
  for (int32_t u = 0; u < units.size(); ++u) {
    const auto b = chain.begin() + units.first[u], e = chain.begin() + units.first[u + 1];
    std::iota(b, e, units.first[u]);
    if (!std::is_sorted(b, e, before_in_chain)) std::sort(b, e, before_in_chain);
    for (auto i = b; i != e;) {
      auto j = i + 1;
      while (j != e && !fed[*i] && !fed[*j] && host[rank_at[*j]] == host[rank_at[*i]]) ++j;
      std::rotate(i, i + s.placed.unit_of[u] % (j - i), j);
      i = j;
    }
  }
  return chain;
}

// Chains, step 2 for the units of `order` in [tier_b, tier_e): each
// chain's first member from the trainer side (every unit's bytes leave it
// once before any goes twice), or, for a contained unit, from a holder of
// a container.
void ChainRoots(const Setting& s, const std::vector<int32_t>& chain, size_t tier_b,
                size_t tier_e, Choice* c) {
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  for (size_t t = tier_b; t < tier_e; ++t) {
    const auto& [neg_bytes, unused, u] = s.order[t];
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    const int32_t root = chain[s.placed.units.first[u]];
    if (c->fed[root]) continue;
    Option best;
    Transfer x(rank_at[root], -neg_bytes, c->Reserved(root));
    const int32_t best_k = FromReplicas(*c, ranks, &x, false, &best);
    int32_t best_h = -1;
    FromContainers(s, *c, u, &x, kMaxChainDepth, &best, &best_h);
    c->fed[root] = 1;
    c->floor = std::max({c->floor, best.t_send, best.t_recv});
    c->Feed(rank_at, root, ranks, best_k, best_h, -neg_bytes);
  }
}

// Chains, step 3 for the units of `order` in [tier_b, tier_e): the other
// members in chain order, from the trainer side or from the member before
// (which holds the bytes by then), by the same rule.
void ChainRest(const Setting& s, const std::vector<int32_t>& chain, size_t tier_b,
               size_t tier_e, Choice* c) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  for (size_t t = tier_b; t < tier_e; ++t) {
    const auto& [neg_bytes, unused, u] = s.order[t];
    const int64_t bytes = -neg_bytes;
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    for (int32_t i = units.first[u] + 1; i < units.first[u + 1]; ++i) {
      const int32_t q = chain[i], f = chain[i - 1], d = rank_at[q];
      if (c->fed[q]) continue;
      const bool relay = c->depth_at[f] < kMaxChainDepth;
      Option best;
      Transfer x(d, bytes, c->Reserved(q));
      if (relay) best = c->loads.Relay(rank_at[f], &x, c->depth_at[f] + 1, c->floor);
      const int32_t best_k = FromReplicas(*c, ranks, &x, relay, &best);
      c->fed[q] = 1;
      c->floor = std::max({c->floor, best.t_send, best.t_recv});
      c->Feed(rank_at, q, ranks, best_k, best_k >= 0 ? -1 : f, bytes);
    }
  }
}

// Chains (see relays.h), after step 1: per tier, every chain's first
// member, then the others in chain order.
void ChainPass(const Setting& s, Choice* c) {
  const std::vector<int32_t> chain = ChainOrder(s, c->fed);
  for (const auto& [tier_b, tier_e] : s.tiers) {
    ChainRoots(s, chain, tier_b, tier_e, c);
    ChainRest(s, chain, tier_b, tier_e, c);
  }
}

// Trees, step 2: one root per uncontained unit with no member fed by step
// 1, from the trainer side (see relays.h for the rule and its ties).
void TreeRoots(const Setting& s, Choice* c) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  for (size_t t = s.tiers[0].first; t < s.tiers[0].second; ++t) {
    const auto& [neg_bytes, unused, u] = s.order[t];
    if (c->unit_fed[u]) continue;
    const int32_t b = units.first[u], e = units.first[u + 1];
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    // Without hosts shared by the two sides every pair is one class: the
    // best pair is the least loaded replica with the least loaded member
    // (the same rule, in N + R steps instead of N * R).
    int32_t q_first = b, q_last = e;
    if (!s.shared_hosts) {
      for (int32_t q = b; q != e; ++q) {
        if (c->loads.InTime(rank_at[q]) < c->loads.InTime(rank_at[q_first])) q_first = q;
      }
      q_last = q_first + 1;
    }
    Option best;
    int32_t best_q = -1, best_k = -1;
    for (int32_t q = q_first; q != q_last; ++q) {
      Transfer x(rank_at[q], -neg_bytes, c->Reserved(q));
      for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
        const Option o = c->loads.Direct(ranks[k], &x, c->floor);
        if (best_q < 0 || o < best) {
          best = o;
          best_q = q;
          best_k = k;
        }
      }
    }
    c->choice_at[best_q] = best_k;
    c->fed[best_q] = 1;
    c->Release(rank_at, best_q, -neg_bytes);
    c->loads.AddDirect(ranks[best_k], rank_at[best_q], -neg_bytes);
    c->floor = std::max({c->floor, best.t_send, best.t_recv});
  }
}

// Trees, step 3 for the units of `order` in [tier_b, tier_e): host by host
// (in order of their first member), on each host the member whose rank has
// received least first (it takes the bytes into the host; the others then
// find a holder on their host), each from a replica or from a fed member of
// its unit or of a container.
void TreeHosts(const Setting& s, size_t tier_b, size_t tier_e, Choice* c) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  std::vector<std::tuple<int32_t, double, int32_t>> todo;  // (host slot, in time, member)
  std::vector<int32_t> hosts;
  for (size_t t = tier_b; t < tier_e; ++t) {
    const auto& [neg_bytes, unused, u] = s.order[t];
    const int64_t bytes = -neg_bytes;
    const int32_t b = units.first[u], e = units.first[u + 1];
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    todo.clear();
    hosts.clear();
    for (int32_t q = b; q != e; ++q) {
      if (c->fed[q]) continue;
      const int32_t h = s.cost.EngineHost(rank_at[q]);
      const int32_t slot = static_cast<int32_t>(
          std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
      if (slot == static_cast<int32_t>(hosts.size())) hosts.push_back(h);
      todo.emplace_back(slot, c->loads.InTime(rank_at[q]), q);
    }
    std::sort(todo.begin(), todo.end());
    for (const auto& [slot, in_time, q] : todo) {
      const int32_t d = rank_at[q];
      Option best;
      Transfer x(d, bytes, c->Reserved(q));
      const int32_t best_k = FromReplicas(*c, ranks, &x, false, &best);
      int32_t best_h = -1;
      for (int32_t h = b; h != e; ++h) {
        if (!c->fed[h] || rank_at[h] == d || c->depth_at[h] >= kMaxRelayDepth) continue;
        const Option o = c->loads.Relay(rank_at[h], &x, c->depth_at[h] + 1, c->floor);
        if (o < best) {
          best = o;
          best_h = h;
        }
      }
      FromContainers(s, *c, u, &x, kMaxRelayDepth, &best, &best_h);
      c->fed[q] = 1;
      c->floor = std::max({c->floor, best.t_send, best.t_recv});
      c->Feed(rank_at, q, ranks, best_k, best_h, bytes);
    }
  }
}

// Trees (see relays.h), after step 1: roots of the uncontained units, then
// per tier the others host by host.
void TreePass(const Setting& s, Choice* c) {
  TreeRoots(s, c);
  if (s.anticipate && !s.shared_hosts) RebalanceRoots(s, c);
  for (const auto& [tier_b, tier_e] : s.tiers) TreeHosts(s, tier_b, tier_e, c);
}

// Returns choice `c` per candidate (`members`: the placed members'
// candidates; `num_cands` candidates in all).
Sources ToSources(const Choice& c, const std::vector<int32_t>& members, size_t num_cands) {
  Sources s;
  s.choice.assign(num_cands, -1);
  s.feeder.assign(num_cands, -1);
  s.depth.assign(num_cands, 0);
  s.max_depth = c.max_depth;
  for (size_t q = 0; q < members.size(); ++q) {
    s.choice[members[q]] = c.choice_at[q];
    s.feeder[members[q]] = c.feeder_at[q] >= 0 ? members[c.feeder_at[q]] : -1;
    s.depth[members[q]] = c.depth_at[q];
  }
  return s;
}

}  // namespace

Sources ChooseRelaySources(const Candidates& candidates, const SideLayout& src,
                           const SideLayout& dst, const PlannerOptions& options,
                           PlanStats* stats, bool anticipate) {
  const CostModel cost(src, dst, options);
  const std::vector<Candidate>& cands = candidates.cands;
  // Per unit (GroupUnits' numbering) its bytes and replicas, and per
  // member its dst rank.
  Units by_unit = GroupUnits(candidates, dst);
  Containers containers_by_unit = ContainingUnits(candidates, by_unit, dst);
  const int32_t num_units = by_unit.size();
  std::vector<UnitInfo> info_by_unit(num_units);
  std::vector<int32_t> rank_by_unit(by_unit.members.size());
  for (int32_t u = 0; u < num_units; ++u) {
    const Candidate& c = cands[by_unit.members[by_unit.first[u]]];
    info_by_unit[u] = {c.bytes, c.dst_record, candidates.PieceOf(c).ranks};
    for (int32_t q = by_unit.first[u]; q < by_unit.first[u + 1]; ++q) {
      rank_by_unit[q] = cands[by_unit.members[q]].dst_rank;
    }
  }
  // Per engine rank whether a trainer rank shares its host, and whether
  // any does (then a pair's link class depends on both ranks, and one GPU
  // may hold both).
  const std::vector<char> trainer_host = OnTrainerHosts(src, dst, cost);
  const double bound = RelayLowerBound(candidates, by_unit, containers_by_unit, rank_by_unit, src,
                                       dst, cost, trainer_host, &stats->sender_lower_bound_seconds);
  size_t tier_at = 0;
  Order order = PlacementOrder(containers_by_unit, info_by_unit, &tier_at);
  const PlacedUnits placed = PlaceUnits(std::move(by_unit), std::move(containers_by_unit),
                                        std::move(info_by_unit), std::move(rank_by_unit), &order);
  const Setting setting{cost,  placed, order, {{0, tier_at}, {tier_at, order.size()}},
                        bound, trainer_host, dst.world_size, SharesHosts(trainer_host),
                        anticipate};
  Choice start(cost, src.world_size, dst.world_size, placed.units.members.size(), num_units,
               anticipate);
  if (anticipate) ReserveBest(setting, &start);
  FeedSameGpu(setting, &start);
  Choice chains = start;
  ChainPass(setting, &chains);
  const bool chained = !anticipate && chains.loads.Slowest() <=
                                          kChainSlack * std::max(bound, start.loads.Slowest());
  const Choice* kept = &chains;
  std::optional<Choice> trees;
  if (!chained) {
    // Trees, unless they come out slower (a bound loose for units that
    // enter a host through one rank): from step 1's state, its same-GPU
    // choices included (its members stay fed: the trees skip them).
    trees.emplace(std::move(start));
    TreePass(setting, &*trees);
    if (!(chains.loads.Slowest() < trees->loads.Slowest())) kept = &*trees;
  }
  stats->predicted_seconds = kept->loads.Slowest();
  stats->lower_bound_seconds = bound;
  stats->relay_depth = kept->max_depth;
  kept->loads.CountLinks(stats);
  return ToSources(*kept, placed.units.members, cands.size());
}

absl::Status CheckEverySourced(const Candidates& candidates, const Sources& sources,
                               const SideLayout& dst) {
  const std::vector<Candidate>& cands = candidates.cands;
  int64_t unsourced = 0;
  size_t first = cands.size();
  for (size_t i = 0; i < cands.size(); ++i) {
    const bool sourced = (i < sources.choice.size() && sources.choice[i] >= 0) ||
                         (i < sources.feeder.size() && sources.feeder[i] >= 0);
    if (sourced) continue;
    if (unsourced++ == 0) first = i;
  }
  if (unsourced == 0) return absl::OkStatus();
  const Candidate& c = cands[first];
  return absl::InternalError(absl::StrCat(
      "planner: no source for ", unsourced, " of ", cands.size(), " transfers, the first to ",
      "engine rank ", c.dst_rank, " of tensor ", dst.tensors[dst.records[c.dst_record].tensor].name));
}

}  // namespace internal_plan
}  // namespace refit
