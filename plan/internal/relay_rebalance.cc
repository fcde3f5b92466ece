// ReserveBest and RebalanceRoots (see relay_rebalance.h).
#include "plan/internal/relay_rebalance.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace refit {
namespace internal_plan {
namespace {

// Moves member q's root (its bytes from a trainer replica, across hosts)
// to member o of its unit: q's bytes go back to their reservation, o's
// cross hosts instead. `roots`: per engine rank its root members, q at
// index `at` of its rank's.
void MoveRoot(const Setting& s, int32_t q, int32_t o, int64_t bytes,
              std::vector<std::vector<int32_t>>* roots, size_t at, Choice* c) {
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  const LinkClass net = LinkClass::kInterHost;
  c->loads.ShiftIn(rank_at[q], net, static_cast<LinkClass>(c->best_at[q]), bytes);
  c->loads.ShiftIn(rank_at[o], static_cast<LinkClass>(c->best_at[o]), net, bytes);
  c->choice_at[o] = c->choice_at[q];
  c->choice_at[q] = -1;
  c->fed[q] = 0;
  c->fed[o] = 1;
  std::vector<int32_t>& from = (*roots)[rank_at[q]];
  from[at] = from.back();
  from.pop_back();
  (*roots)[rank_at[o]].push_back(o);
}

}  // namespace

void ReserveBest(const Setting& s, Choice* c) {
  const Units& units = s.placed.units;
  const Containers& containers = s.placed.containers;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  for (int32_t u = 0; u < units.size(); ++u) {
    const absl::Span<const int32_t> ranks = s.placed.info[u].ranks;
    for (int32_t q = units.first[u]; q < units.first[u + 1]; ++q) {
      const int32_t d = rank_at[q];
      LinkClass best = LinkClass::kInterHost;
      auto offer = [&](LinkClass lc) {
        if (s.cost.SecondsPerByte(lc) < s.cost.SecondsPerByte(best)) best = lc;
      };
      for (int32_t r : ranks) offer(s.cost.ClassOf(r, d));
      auto holders = [&](int32_t h) {
        for (int32_t o = units.first[h]; o < units.first[h + 1]; ++o) {
          if (rank_at[o] != d) offer(s.cost.EngineClassOf(rank_at[o], d));
        }
      };
      holders(u);
      for (int32_t k = containers.first[u]; k < containers.first[u + 1]; ++k) {
        holders(containers.units[k]);
      }
      c->best_at[q] = static_cast<int8_t>(best);
      c->loads.Reserve(d, best, s.placed.info[u].bytes);
    }
  }
}

void RebalanceRoots(const Setting& s, Choice* c) {
  const Units& units = s.placed.units;
  const std::vector<int32_t>& rank_at = s.placed.rank_at;
  std::vector<std::vector<int32_t>> roots(s.dst_world);  // root members per rank
  std::vector<int32_t> unit_at(units.members.size());
  for (int32_t u = 0; u < units.size(); ++u) {
    for (int32_t q = units.first[u]; q < units.first[u + 1]; ++q) {
      unit_at[q] = u;
      if (c->fed[q] && c->choice_at[q] >= 0 && c->best_at[q] >= 0) roots[rank_at[q]].push_back(q);
    }
  }
  const LinkClass net = LinkClass::kInterHost;
  std::vector<int32_t> by_time(s.dst_world);
  bool moved = true;
  for (int pass = 0; pass < 16 && moved; ++pass) {
    moved = false;
    std::iota(by_time.begin(), by_time.end(), 0);
    std::stable_sort(by_time.begin(), by_time.end(), [&](int32_t a, int32_t b) {
      return c->loads.InTime(a) > c->loads.InTime(b);
    });
    for (const int32_t a : by_time) {
      for (size_t i = 0; i < roots[a].size();) {
        const int32_t q = roots[a][i];
        const int32_t u = unit_at[q];
        const int64_t bytes = s.placed.info[u].bytes;
        const double now = c->loads.InTime(a);
        const double from_after =
            c->loads.InTimeShifted(a, net, static_cast<LinkClass>(c->best_at[q]), bytes);
        double best_t = now;
        int32_t best_o = -1;
        for (int32_t o = units.first[u]; o < units.first[u + 1]; ++o) {
          if (c->fed[o] || rank_at[o] == a) continue;
          const double t = std::max(
              from_after, c->loads.InTimeShifted(
                              rank_at[o], static_cast<LinkClass>(c->best_at[o]), net, bytes));
          if (t < best_t) {
            best_t = t;
            best_o = o;
          }
        }
        if (best_o < 0) {
          ++i;
          continue;
        }
        MoveRoot(s, q, best_o, bytes, &roots, i, c);  // roots[a][i] is another root now
        moved = true;
      }
    }
  }
  c->floor = std::max(s.bound, c->loads.Slowest());
}

}  // namespace internal_plan
}  // namespace refit
