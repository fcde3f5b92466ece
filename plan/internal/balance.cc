// Replica choice: greedy, deterministic minimization of the predicted refit
// time (plan/cost.h), and the lower bound it is measured against.
#include "plan/internal/balance.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace refit {
namespace internal_plan {
namespace {

// A rank's bytes by link class; its time is CostModel::Seconds of them.
struct Load {
  int64_t intra = 0;
  int64_t inter = 0;
  void Add(bool same_host, int64_t bytes) { (same_host ? intra : inter) += bytes; }
};

// Seconds of `load` plus `bytes` over the given link class.
double After(const CostModel& cost, const Load& load, bool same_host,
             int64_t bytes) {
  return same_host ? cost.Seconds(load.intra + bytes, load.inter)
                   : cost.Seconds(load.intra, load.inter + bytes);
}

// The lower bound of PlanStats::lower_bound_seconds: per dst rank, per src
// rank (bytes only it can send) and per replica group (distinct rank sets
// of the pieces; the bytes asked of the group plus its ranks' own, over
// its ranks) and over all src ranks (every byte over their number), each
// byte over the best link any of its replicas offers.
double LowerBound(const Candidates& candidates, const SideLayout& src,
                  const SideLayout& dst, const CostModel& cost) {
  std::vector<Load> dst_load(dst.world_size), src_load(src.world_size);
  // Replica group per (src tensor, piece), numbered on first use.
  std::map<std::vector<int32_t>, int32_t> group_of_ranks;
  std::vector<std::vector<int32_t>> group(candidates.pieces.size());
  std::vector<Load> group_load;
  std::vector<std::vector<int32_t>> group_ranks;  // distinct, ascending
  for (const Candidate& c : candidates.cands) {
    const Piece& p = candidates.PieceOf(c);
    // The best link a replica offers: within the host when one is there
    // and that is not the slower class (or when every replica is there).
    bool same = false;
    if (cost.placement_known()) {
      bool any_same = false, any_other = false;
      for (int32_t r : p.ranks) {
        (cost.SameHost(r, c.dst_rank) ? any_same : any_other) = true;
      }
      same = any_same && (!any_other || cost.intra_not_slower());
    }
    dst_load[c.dst_rank].Add(same, c.bytes);
    if (p.ranks.size() == 1) {
      src_load[p.ranks[0]].Add(same, c.bytes);
      continue;
    }
    std::vector<int32_t>& g = group[c.src_tensor];
    if (g.empty()) g.assign(candidates.pieces[c.src_tensor].pieces.size(), -1);
    if (g[c.piece] < 0) {
      auto [it, added] = group_of_ranks.emplace(
          p.ranks, static_cast<int32_t>(group_load.size()));
      if (added) {
        group_load.emplace_back();
        std::vector<int32_t> ranks = p.ranks;
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        group_ranks.push_back(std::move(ranks));
      }
      g[c.piece] = it->second;
    }
    group_load[g[c.piece]].Add(same, c.bytes);
  }
  // Every byte leaves some src rank: the slowest at least the mean.
  double all = 0;
  for (const Load& l : dst_load) all += cost.Seconds(l.intra, l.inter);
  double bound = src.world_size > 0 ? all / src.world_size : 0;
  for (const Load& l : dst_load) bound = std::max(bound, cost.Seconds(l.intra, l.inter));
  for (const Load& l : src_load) bound = std::max(bound, cost.Seconds(l.intra, l.inter));
  // A group's ranks spend, together, at least their own bytes' time plus
  // the group's: the slowest of them at least the mean of that.
  for (size_t i = 0; i < group_load.size(); ++i) {
    double total = cost.Seconds(group_load[i].intra, group_load[i].inter);
    for (int32_t r : group_ranks[i]) {
      total += cost.Seconds(src_load[r].intra, src_load[r].inter);
    }
    bound = std::max(bound, total / group_ranks[i].size());
  }
  return bound;
}

}  // namespace

std::vector<int32_t> BalanceReplicas(const Candidates& candidates,
                                     const SideLayout& src,
                                     const SideLayout& dst,
                                     const PlannerOptions& options,
                                     PlanStats* stats) {
  const CostModel cost(src, dst, options);
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<int32_t> choice(cands.size(), -1);  // index into replicas
  std::vector<Load> src_load(src.world_size), dst_load(dst.world_size);
  // (-bytes, dst record, candidate): bytes descending, then destination
  // record order, then the source piece order (candidates of one record
  // are generated in piece order).
  std::vector<std::tuple<int64_t, int32_t, int32_t>> multi;
  for (size_t i = 0; i < cands.size(); ++i) {
    const Piece& p = candidates.PieceOf(cands[i]);
    if (p.ranks.size() == 1) {
      choice[i] = 0;
      const bool same = cost.SameHost(p.ranks[0], cands[i].dst_rank);
      src_load[p.ranks[0]].Add(same, cands[i].bytes);
      dst_load[cands[i].dst_rank].Add(same, cands[i].bytes);
    } else {
      multi.emplace_back(-cands[i].bytes, cands[i].dst_record,
                         static_cast<int32_t>(i));
    }
  }
  std::sort(multi.begin(), multi.end());
  // A choice that keeps both its ranks under `floor` (the lower bound, or
  // the slowest rank so far when above it) costs the refit nothing: among
  // those the faster link wins, keeping slow links free for bytes that
  // need them.
  const double bound = LowerBound(candidates, src, dst, cost);
  double floor = bound;
  for (const Load& l : src_load) floor = std::max(floor, cost.Seconds(l.intra, l.inter));
  for (const Load& l : dst_load) floor = std::max(floor, cost.Seconds(l.intra, l.inter));
  for (const auto& [neg_bytes, unused, ci] : multi) {
    const int64_t bytes = -neg_bytes;
    const int32_t d = cands[ci].dst_rank;
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[ci]).ranks;
    int32_t best = -1;
    double best_cost = 0, best_src = 0, best_peak = 0;
    bool best_same = false;
    for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
      const int32_t r = ranks[k];
      const bool same = cost.SameHost(r, d);
      const double t_src = After(cost, src_load[r], same, bytes);
      const double peak = std::max(t_src, After(cost, dst_load[d], same, bytes));
      const double t = std::max(peak, floor);
      // Replicas are sorted by (rank, index): on a full tie keep the
      // earlier one.
      if (best < 0 || t < best_cost ||
          (t == best_cost &&
           ((same && !best_same) ||
            (same == best_same && t_src < best_src)))) {
        best = k;
        best_cost = t;
        best_src = t_src;
        best_same = same;
        best_peak = peak;
      }
    }
    choice[ci] = best;
    src_load[ranks[best]].Add(best_same, bytes);
    dst_load[d].Add(best_same, bytes);
    floor = std::max(floor, best_peak);
  }
  double predicted = 0;
  for (const Load& l : src_load) {
    predicted = std::max(predicted, cost.Seconds(l.intra, l.inter));
    stats->intra_host_bytes += l.intra;
    stats->inter_host_bytes += l.inter;
  }
  for (const Load& l : dst_load) predicted = std::max(predicted, cost.Seconds(l.intra, l.inter));
  stats->predicted_seconds = predicted;
  stats->lower_bound_seconds = bound;
  return choice;
}

}  // namespace internal_plan
}  // namespace refit
