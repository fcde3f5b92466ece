// Lower bounds: sender-only and relay-aware.
#include "plan/internal/bound.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace refit {
namespace internal_plan {
namespace {

// The trainer side's terms: bytes each src rank alone must send, bytes per
// replica group, and all bytes, each at the link class it is given.
class TrainerSide {
 public:
  TrainerSide(const Candidates& candidates, int32_t src_world)
      : candidates_(candidates), src_world_(src_world), src_load_(src_world),
        group_(candidates.pieces.size()) {}

  // Counts candidate c's bytes leaving the trainer side over class `best`.
  void Add(const Candidate& c, LinkClass best) {
    const Piece& p = candidates_.PieceOf(c);
    all_.Add(best, c.bytes);
    if (p.ranks.size() == 1) {
      src_load_[p.ranks[0]].Add(best, c.bytes);
      return;
    }
    std::vector<int32_t>& g = group_[c.src_tensor];
    if (g.empty()) g.assign(candidates_.pieces[c.src_tensor].pieces.size(), -1);
    if (g[c.piece] < 0) {
      auto [it, added] =
          group_of_ranks_.emplace(p.ranks, static_cast<int32_t>(group_load_.size()));
      if (added) {
        group_load_.emplace_back();
        std::vector<int32_t> ranks = p.ranks;
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        group_ranks_.push_back(std::move(ranks));
      }
      g[c.piece] = it->second;
    }
    group_load_[g[c.piece]].Add(best, c.bytes);
  }

  // Returns the largest of the terms.
  double Bound(const CostModel& cost) const {
    // Every byte leaves some src rank: the slowest at least the mean.
    double bound = src_world_ > 0 ? cost.Seconds(all_) / src_world_ : 0;
    for (const LinkBytes& l : src_load_) bound = std::max(bound, cost.Seconds(l));
    // A group's ranks spend, together, at least their own bytes' time plus
    // the group's: the slowest of them at least the mean of that.
    for (size_t i = 0; i < group_load_.size(); ++i) {
      double total = cost.Seconds(group_load_[i]);
      for (int32_t r : group_ranks_[i]) total += cost.Seconds(src_load_[r]);
      bound = std::max(bound, total / group_ranks_[i].size());
    }
    return bound;
  }

 private:
  const Candidates& candidates_;
  int32_t src_world_;
  LinkBytes all_;
  std::vector<LinkBytes> src_load_;
  std::map<std::vector<int32_t>, int32_t> group_of_ranks_;
  std::vector<std::vector<int32_t>> group_;  // per (src tensor, piece)
  std::vector<LinkBytes> group_load_;
  std::vector<std::vector<int32_t>> group_ranks_;  // distinct, ascending
};

// Returns the faster of two link classes (`k` on a tie).
LinkClass Faster(const CostModel& cost, LinkClass k, LinkClass other) {
  return cost.SecondsPerByte(other) < cost.SecondsPerByte(k) ? other : k;
}

}  // namespace

double SenderLowerBound(const Candidates& candidates, const SideLayout& src,
                        const SideLayout& dst, const CostModel& cost) {
  std::vector<LinkBytes> dst_load(dst.world_size);
  TrainerSide trainer(candidates, src.world_size);
  for (const Candidate& c : candidates.cands) {
    LinkClass best = LinkClass::kInterHost;
    if (cost.placement_known()) {
      for (int32_t r : candidates.PieceOf(c).ranks) best = Faster(cost, best, cost.ClassOf(r, c.dst_rank));
    }
    dst_load[c.dst_rank].Add(best, c.bytes);
    trainer.Add(c, best);
  }
  double bound = trainer.Bound(cost);
  for (const LinkBytes& l : dst_load) bound = std::max(bound, cost.Seconds(l));
  return bound;
}

double RelayLowerBound(const Candidates& candidates, const Units& units,
                       const Containers& containers, const SideLayout& src,
                       const SideLayout& dst, const CostModel& cost) {
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<LinkBytes> dst_load(dst.world_size);
  TrainerSide trainer(candidates, src.world_size);
  const bool known = cost.placement_known();
  // Engine hosts numbered 0.. (slot), and their engine ranks.
  std::vector<int32_t> slot_of(dst.world_size);
  std::vector<int32_t> ranks_on;
  {
    std::map<int32_t, int32_t> slots;
    for (int32_t d = 0; d < dst.world_size; ++d) {
      auto it = slots.emplace(cost.EngineHost(d), static_cast<int32_t>(slots.size())).first;
      slot_of[d] = it->second;
      if (it->second == static_cast<int32_t>(ranks_on.size())) ranks_on.push_back(0);
      ++ranks_on[it->second];
    }
  }
  // Per host, seconds its engine ranks spend receiving, together.
  std::vector<double> host_seconds(ranks_on.size(), 0.0);
  // Per member of the unit at hand: (host slot, its best seconds, the best
  // seconds a trainer replica offers it).
  std::vector<std::tuple<int32_t, double, double>> per_member;
  for (int32_t u = 0; u < units.size(); ++u) {
    const int32_t* b = units.members.data() + units.first[u];
    const int32_t* e = units.members.data() + units.first[u + 1];
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[*b]).ranks;
    const int64_t bytes = cands[*b].bytes;
    LinkClass unit_best = LinkClass::kInterHost;
    per_member.clear();
    for (const int32_t* m = b; m != e; ++m) {
      const int32_t d = cands[*m].dst_rank;
      LinkClass best = LinkClass::kInterHost;
      if (known) {
        for (int32_t r : ranks) best = Faster(cost, best, cost.ClassOf(r, d));
      }
      unit_best = Faster(cost, unit_best, best);
      const double from_trainer = bytes * cost.SecondsPerByte(best);
      if (known) {
        auto holders = [&](int32_t h) {
          for (int32_t q = units.first[h]; q < units.first[h + 1]; ++q) {
            const int32_t o = cands[units.members[q]].dst_rank;
            if (o != d) best = Faster(cost, best, cost.EngineClassOf(o, d));
          }
        };
        holders(u);
        for (int32_t k = containers.first[u]; k < containers.first[u + 1]; ++k) {
          holders(containers.units[k]);
        }
      }
      dst_load[d].Add(best, bytes);
      per_member.emplace_back(slot_of[d], bytes * cost.SecondsPerByte(best), from_trainer);
    }
    // On each host one member takes the bytes from a trainer rank or from
    // another host (no faster than the best trainer replica offers it); the
    // others at their best. A contained unit: all at their best (a holder
    // of a container may be on the host), and no trainer term.
    const bool contained = containers.Contained(u);
    std::sort(per_member.begin(), per_member.end());
    for (size_t i = 0; i < per_member.size();) {
      size_t j = i;
      double sum = 0, most = 0, entry = std::get<2>(per_member[i]);
      for (; j < per_member.size() && std::get<0>(per_member[j]) == std::get<0>(per_member[i]); ++j) {
        sum += std::get<1>(per_member[j]);
        most = std::max(most, std::get<1>(per_member[j]));
        entry = std::min(entry, std::get<2>(per_member[j]));
      }
      host_seconds[std::get<0>(per_member[i])] += contained ? sum : sum - most + entry;
      i = j;
    }
    if (!contained) trainer.Add(cands[*b], unit_best);
  }
  double bound = trainer.Bound(cost);
  for (const LinkBytes& l : dst_load) bound = std::max(bound, cost.Seconds(l));
  for (size_t h = 0; h < host_seconds.size(); ++h) {
    bound = std::max(bound, host_seconds[h] / ranks_on[h]);
  }
  return bound;
}

}  // namespace internal_plan
}  // namespace refit
