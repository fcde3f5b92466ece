// Lower bounds: sender-only and relay-aware.
#include "plan/internal/bound.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/internal/trainer_hosts.h"

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

  // Counts `bytes` of candidate c's piece leaving the trainer side over
  // class `best` (c's own bytes, or those of several candidates of its
  // piece: the terms add bytes).
  void Add(const Candidate& c, LinkClass best, int64_t bytes) {
    const Piece& p = candidates_.PieceOf(c);
    all_.Add(best, bytes);
    if (p.ranks.size() == 1) {
      src_load_[p.ranks[0]].Add(best, bytes);
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
    group_load_[g[c.piece]].Add(best, bytes);
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

// Returns the fastest link class a replica on `ranks` offers dst rank `d`
// (the network where the placement is unknown, or where no trainer rank
// shares d's host: `on_trainer_host`, OnTrainerHosts' answer, empty or
// false at d).
LinkClass BestTrainerLink(const CostModel& cost, const std::vector<char>& on_trainer_host,
                          const std::vector<int32_t>& ranks, int32_t d) {
  LinkClass best = LinkClass::kInterHost;
  if (!on_trainer_host.empty() && on_trainer_host[d]) {
    for (int32_t r : ranks) best = Faster(cost, best, cost.ClassOf(r, d));
  }
  return best;
}

// SenderLowerBound's terms, candidate by candidate: each candidate's bytes
// at its dst rank and on the trainer side, over the best link a replica
// offers it.
class SenderTerms {
 public:
  SenderTerms(const Candidates& candidates, int32_t src_world, int32_t dst_world)
      : dst_load_(dst_world), trainer_(candidates, src_world) {}

  void Add(const Candidate& c, LinkClass best) {
    AddDst(c.dst_rank, best, c.bytes);
    AddTrainer(c, best, c.bytes);
  }
  // Add's two halves: `bytes` at dst rank d, and `bytes` of c's piece on
  // the trainer side (c's, or those of several candidates of its piece
  // over the same class: the terms add bytes).
  void AddDst(int32_t d, LinkClass best, int64_t bytes) { dst_load_[d].Add(best, bytes); }
  void AddTrainer(const Candidate& c, LinkClass best, int64_t bytes) {
    trainer_.Add(c, best, bytes);
  }
  // Returns the largest of the terms.
  double Bound(const CostModel& cost) const {
    double bound = trainer_.Bound(cost);
    for (const LinkBytes& l : dst_load_) bound = std::max(bound, cost.Seconds(l));
    return bound;
  }

 private:
  std::vector<LinkBytes> dst_load_;
  TrainerSide trainer_;
};

// A member's two links (relays' bound): the best a trainer replica offers
// it (low 2 bits) and its best (next 2).
uint8_t EntryLinks(LinkClass from_trainer, LinkClass best) {
  return static_cast<uint8_t>(static_cast<int>(from_trainer) | static_cast<int>(best) << 2);
}

// Returns the seconds `bytes` take over a member's link from a trainer
// replica beyond its best link (`links`: EntryLinks).
double EntryExtra(uint8_t links, int64_t bytes, const CostModel& cost) {
  const double from_trainer = bytes * cost.SecondsPerByte(static_cast<LinkClass>(links & 3));
  return from_trainer - bytes * cost.SecondsPerByte(static_cast<LinkClass>(links >> 2));
}

// Returns, over every uncontained unit and engine host holding some of
// its members, the least time any of those members can take when it is
// the one taking the unit into the host: its bytes at their best
// (`dst_load`) plus its EntryExtra for this unit (`entry_links`). Why it bounds every plan:
// each candidate has one source, so the members of an uncontained unit
// form trees rooted at trainer ranks, each member fed by a trainer rank
// or by a member of the unit fed before it. On a host, the member fed
// first is fed by a trainer rank or by a member on another host, over a
// link no faster than the best a trainer replica offers it (the network
// when none shares its host), so its time is at least this. The host
// term above spreads that extra over the host's ranks; this one does not
// (a small replicated tensor is received whole by one rank).
double EntryBound(const Candidates& candidates, const Units& units, const Containers& containers,
                  const std::vector<int32_t>& member_rank, const std::vector<int32_t>& slot_of,
                  const std::vector<LinkBytes>& dst_load,
                  const std::vector<uint8_t>& entry_links, const CostModel& cost) {
  std::vector<double> base(dst_load.size());
  for (size_t d = 0; d < dst_load.size(); ++d) base[d] = cost.Seconds(dst_load[d]);
  // Per host slot, the least entry time of the unit at hand (-1: none yet).
  std::vector<double> least(base.size(), -1.0);
  std::vector<int32_t> touched;
  double bound = 0;
  for (int32_t u = 0; u < units.size(); ++u) {
    if (containers.Contained(u)) continue;
    touched.clear();
    const int64_t bytes = candidates.cands[units.members[units.first[u]]].bytes;
    for (int32_t q = units.first[u]; q < units.first[u + 1]; ++q) {
      const int32_t d = member_rank[q];
      const double extra = EntryExtra(entry_links[q], bytes, cost);
      double& l = least[slot_of[d]];
      if (l < 0) touched.push_back(slot_of[d]);
      l = l < 0 ? base[d] + extra : std::min(l, base[d] + extra);
    }
    for (int32_t h : touched) {
      bound = std::max(bound, least[h]);
      least[h] = -1.0;
    }
  }
  return bound;
}

// Returns, per engine host, over every set S of its engine ranks that
// holds all of some uncontained unit's bytes there, the mean time of S's
// ranks: their bytes at their best (`dst_load`), plus, for each
// uncontained unit with a member on the host whose holders there (its
// members and those of the units it contains) all lie in S, the extra of
// taking its bytes into the host (each byte over the link from a trainer
// replica, at best, instead of over its holder's best link; `entry_links`
// per member). Why it bounds every plan: an engine rank forwards only
// bytes it holds, so each byte of such a unit comes into the host, from a
// trainer rank or across hosts, through a rank of S; the slowest of S
// takes at least their mean. Where every rank of the host holds the unit
// this is the host term of RelayLowerBound; where few do (one engine's
// ranks hold regions the other's do not, or only some of a host's ranks
// need what lives on another host), those few carry it in.
double HolderSetBound(const Units& units, const Containers& containers,
                      const std::vector<int32_t>& member_rank, const std::vector<int32_t>& slot_of,
                      const std::vector<LinkBytes>& dst_load,
                      const std::vector<uint8_t>& entry_links, const Candidates& candidates,
                      const CostModel& cost) {
  const int32_t num_units = units.size();
  // Per unit, the units it contains (Containers inverted).
  std::vector<int32_t> inner_first(num_units + 1, 0);
  for (int32_t c = 0; c < num_units; ++c) {
    for (int32_t k = containers.first[c]; k < containers.first[c + 1]; ++k) {
      ++inner_first[containers.units[k] + 1];
    }
  }
  for (int32_t u = 0; u < num_units; ++u) inner_first[u + 1] += inner_first[u];
  std::vector<int32_t> inner(inner_first[num_units]);
  {
    std::vector<int32_t> at(inner_first.begin(), inner_first.end() - 1);
    for (int32_t c = 0; c < num_units; ++c) {
      for (int32_t k = containers.first[c]; k < containers.first[c + 1]; ++k) {
        inner[at[containers.units[k]]++] = c;
      }
    }
  }
  const int32_t dst_world = static_cast<int32_t>(dst_load.size());
  // Per engine rank, the extras of the units it alone holds on its host;
  // per (host slot, holder set of two or more ranks), the extras of the
  // units held there by exactly that set.
  std::vector<double> alone_extra(dst_world, 0.0);
  std::map<std::pair<int32_t, std::vector<int32_t>>, double> set_extra;
  // The unit at hand's holders: (slot, rank, seconds a byte from a trainer
  // replica, seconds a byte over its best link, whether a member).
  std::vector<std::tuple<int32_t, int32_t, double, double, bool>> holders;
  std::vector<int32_t> ranks;
  for (int32_t u = 0; u < num_units; ++u) {
    if (containers.Contained(u)) continue;
    // No extra anywhere when the unit contains none and each member's best
    // is the link from a trainer replica (no other holder on its host).
    if (inner_first[u] == inner_first[u + 1]) {
      bool any = false;
      for (int32_t q = units.first[u]; q < units.first[u + 1] && !any; ++q) {
        any = (entry_links[q] & 3) != (entry_links[q] >> 2);
      }
      if (!any) continue;
    }
    holders.clear();
    auto add = [&](int32_t h, bool member) {
      for (int32_t q = units.first[h]; q < units.first[h + 1]; ++q) {
        const uint8_t links = entry_links[q];
        holders.emplace_back(slot_of[member_rank[q]], member_rank[q],
                             cost.SecondsPerByte(static_cast<LinkClass>(links & 3)),
                             cost.SecondsPerByte(static_cast<LinkClass>(links >> 2)), member);
      }
    };
    add(u, true);
    for (int32_t k = inner_first[u]; k < inner_first[u + 1]; ++k) add(inner[k], false);
    std::sort(holders.begin(), holders.end());
    const int64_t bytes = candidates.cands[units.members[units.first[u]]].bytes;
    for (size_t i = 0; i < holders.size();) {
      size_t j = i;
      bool has_member = false;
      double entry = std::get<2>(holders[i]), best = 0;
      ranks.clear();
      for (; j < holders.size() && std::get<0>(holders[j]) == std::get<0>(holders[i]); ++j) {
        has_member = has_member || std::get<4>(holders[j]);
        entry = std::min(entry, std::get<2>(holders[j]));
        best = std::max(best, std::get<3>(holders[j]));
        if (ranks.empty() || ranks.back() != std::get<1>(holders[j])) {
          ranks.push_back(std::get<1>(holders[j]));
        }
      }
      // Without a member the host needs only the contained regions, not
      // the unit's bytes: no term (a bound may leave terms out).
      const double extra = static_cast<double>(bytes) * (entry - best);
      if (has_member && extra > 0) {
        if (ranks.size() == 1) {
          alone_extra[ranks[0]] += extra;
        } else {
          set_extra[{std::get<0>(holders[i]), ranks}] += extra;
        }
      }
      i = j;
    }
  }
  std::vector<double> own(dst_world);
  double bound = 0;
  for (int32_t d = 0; d < dst_world; ++d) {
    own[d] = cost.Seconds(dst_load[d]) + alone_extra[d];
    bound = std::max(bound, own[d]);
  }
  // Each set's sum takes the sets of its host that lie in it (ordered by
  // host slot, so a host's sets are side by side).
  for (auto s = set_extra.begin(); s != set_extra.end();) {
    auto e = s;
    while (e != set_extra.end() && e->first.first == s->first.first) ++e;
    for (auto a = s; a != e; ++a) {
      const std::vector<int32_t>& big = a->first.second;
      double total = 0;
      for (int32_t d : big) total += own[d];
      for (auto b = s; b != e; ++b) {
        const std::vector<int32_t>& small = b->first.second;
        if (std::includes(big.begin(), big.end(), small.begin(), small.end())) total += b->second;
      }
      bound = std::max(bound, total / big.size());
    }
    s = e;
  }
  return bound;
}

// Returns the time the hosts of the trainer take to send out what the
// other hosts need, where engine ranks share them (0 where none does, or
// the placement is unknown): X, the bytes engine ranks on other hosts
// need of pairwise disjoint regions (per source piece, the units with a
// member off the trainer's hosts, by bytes descending, each kept when it
// meets none kept before), over t trainer ranks and e engine ranks on the
// trainer's hosts, is X c_i / (t + e (1 - c_n / c_i)), c_i the network's
// seconds a byte and c_n the fastest link from a trainer rank to one of
// those engine ranks. Why it bounds every plan: follow the sources back
// from an engine rank off the trainer's hosts that needs a kept region;
// the first hop that leaves those hosts is a send over the network (c_i)
// by a trainer rank, or by an engine rank there that holds a region
// containing it, which a trainer rank sent into the hosts (c_n) without
// leaving them. Sends carry regions that contain the kept regions they
// serve, which are disjoint, so a send costs at least their sum. With V
// of X leaving through engine ranks, the trainer ranks spend at least
// (X - V) c_i + V c_n and the engine ranks V c_i; the slowest of each
// side takes at least its mean, and the larger of the two means is
// smallest when V = e T / c_i, which gives the figure. Also at least
// (U + X c_i) / (t + e), U the seconds of the uncontained units with
// every member on the trainer's hosts, each over the fastest link from a
// replica to a member: each is sent by a trainer rank into those hosts at
// least once (no container holds it), apart from the sends that leave
// them, so the trainer ranks spend at least U + (X - V) c_i.
double TrainerHostsExitBound(const Candidates& candidates, const Units& units,
                             const Containers& containers, const SideLayout& src,
                             const SideLayout& dst, const CostModel& cost,
                             const std::vector<char>& on_trainer_host) {
  if (!cost.placement_known() || src.world_size == 0) return 0;
  const double c_i = cost.SecondsPerByte(LinkClass::kInterHost);
  double c_n = c_i;
  int32_t engines = 0;
  for (int32_t d = 0; d < dst.world_size; ++d) {
    if (!on_trainer_host[d]) continue;
    ++engines;
    for (int32_t r = 0; r < src.world_size; ++r) {
      c_n = std::min(c_n, cost.SecondsPerByte(cost.ClassOf(r, d)));
    }
  }
  if (engines == 0) return 0;
  // (piece, -bytes, unit) of the units with a member off the trainer's
  // hosts.
  std::vector<std::tuple<std::pair<int32_t, int32_t>, int64_t, int32_t>> off;
  const std::vector<Candidate>& cands = candidates.cands;
  double stay = 0;  // U
  for (int32_t u = 0; u < units.size(); ++u) {
    bool leaves = false;
    for (int32_t q = units.first[u]; q < units.first[u + 1] && !leaves; ++q) {
      leaves = !on_trainer_host[cands[units.members[q]].dst_rank];
    }
    const Candidate& c = cands[units.members[units.first[u]]];
    if (leaves) {
      off.emplace_back(std::make_pair(c.src_tensor, c.piece), -c.bytes, u);
    } else if (!containers.Contained(u)) {
      double spb = c_i;
      for (int32_t q = units.first[u]; q < units.first[u + 1]; ++q) {
        for (int32_t r : candidates.PieceOf(c).ranks) {
          spb = std::min(spb, cost.SecondsPerByte(cost.ClassOf(r, cands[units.members[q]].dst_rank)));
        }
      }
      stay += static_cast<double>(c.bytes) * spb;
    }
  }
  std::sort(off.begin(), off.end());
  int64_t x = 0;
  std::vector<Box> kept;
  for (size_t i = 0; i < off.size();) {
    kept.clear();
    size_t j = i;
    for (; j < off.size() && std::get<0>(off[j]) == std::get<0>(off[i]); ++j) {
      if (static_cast<int32_t>(kept.size()) >= kMaxContainerSearch) continue;
      const Candidate& c = cands[units.members[units.first[std::get<2>(off[j])]]];
      Box region = Intersect(candidates.PieceOf(c).box, dst.records[c.dst_record].box);
      bool meets = false;
      for (const Box& k : kept) meets = meets || Intersects(k, region);
      if (meets) continue;
      kept.push_back(std::move(region));
      x -= std::get<1>(off[j]);
    }
    i = j;
  }
  const double exits = static_cast<double>(x) * c_i;
  return std::max(exits / (src.world_size + engines * (1 - c_n / c_i)),
                  (stay + exits) / (src.world_size + engines));
}

}  // namespace

double SenderLowerBound(const Candidates& candidates, const SideLayout& src,
                        const SideLayout& dst, const CostModel& cost) {
  SenderTerms terms(candidates, src.world_size, dst.world_size);
  const std::vector<char> on_trainer_host = OnTrainerHosts(src, dst, cost);
  for (const Candidate& c : candidates.cands) {
    terms.Add(c, BestTrainerLink(cost, on_trainer_host, candidates.PieceOf(c).ranks, c.dst_rank));
  }
  return terms.Bound(cost);
}

double RelayLowerBound(const Candidates& candidates, const Units& units,
                       const Containers& containers, const std::vector<int32_t>& member_rank,
                       const SideLayout& src, const SideLayout& dst, const CostModel& cost,
                       const std::vector<char>& on_trainer_host, double* sender_bound) {
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<LinkBytes> dst_load(dst.world_size);
  TrainerSide trainer(candidates, src.world_size);
  // SenderLowerBound's terms, from the same links (every candidate is a
  // member of one unit).
  SenderTerms sender(candidates, src.world_size, dst.world_size);
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
  // Per member (units.members order): its link from a trainer replica
  // and its best link (EntryLinks); the seconds it takes over its best
  // when it is the one taking the unit into its host (EntryExtra).
  std::vector<uint8_t> entry_links(units.members.size(), 0);
  // Per host slot, the engine ranks of the unit at hand's holders there
  // (its members, then its containers' members, in that order), and the
  // slots that have some. A holder on another host than a member offers
  // it the network, never faster than the best it starts with (a trainer
  // replica's, at worst the network): only holders on its host count.
  std::vector<std::vector<int32_t>> holders_on(ranks_on.size());
  std::vector<int32_t> holder_slots;
  // Per host slot, the last unit with a member there.
  std::vector<int32_t> seen(ranks_on.size(), -1);
  for (int32_t u = 0; u < units.size(); ++u) {
    const int32_t* b = units.members.data() + units.first[u];
    const int32_t* e = units.members.data() + units.first[u + 1];
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[*b]).ranks;
    const int64_t bytes = cands[*b].bytes;
    const bool contained = containers.Contained(u);
    // Alone: an uncontained unit with one member per host, so that no
    // other holder shares a member's host and each host's term is the
    // member's own (the general case below, with one member a host).
    bool alone = !contained;
    for (int32_t q = units.first[u]; q < units.first[u + 1] && alone; ++q) {
      int32_t& last = seen[slot_of[member_rank[q]]];
      alone = last != u;
      last = u;
    }
    LinkClass unit_best = LinkClass::kInterHost;
    per_member.clear();
    if (known && !alone) {
      auto add_holders = [&](int32_t h) {
        for (int32_t q = units.first[h]; q < units.first[h + 1]; ++q) {
          const int32_t o = member_rank[q];
          std::vector<int32_t>& on = holders_on[slot_of[o]];
          if (on.empty()) holder_slots.push_back(slot_of[o]);
          on.push_back(o);
        }
      };
      add_holders(u);
      for (int32_t k = containers.first[u]; k < containers.first[u + 1]; ++k) {
        add_holders(containers.units[k]);
      }
    }
    // The unit's bytes per link class on the trainer side of the sender
    // bound, added once per class below.
    int64_t sender_bytes[kNumLinkClasses] = {};
    for (const int32_t* m = b; m != e; ++m) {
      const int32_t d = member_rank[m - units.members.data()];
      LinkClass best = BestTrainerLink(cost, on_trainer_host, ranks, d);
      unit_best = Faster(cost, unit_best, best);
      const LinkClass trainer_best = best;
      sender.AddDst(d, best, bytes);
      sender_bytes[static_cast<int>(best)] += bytes;
      const double from_trainer = bytes * cost.SecondsPerByte(best);
      if (known && !alone) {
        for (int32_t o : holders_on[slot_of[d]]) {
          if (o != d) best = Faster(cost, best, cost.EngineClassOf(o, d));
        }
      }
      dst_load[d].Add(best, bytes);
      entry_links[m - units.members.data()] = EntryLinks(trainer_best, best);
      if (alone) {
        host_seconds[slot_of[d]] += from_trainer;
      } else {
        per_member.emplace_back(slot_of[d], bytes * cost.SecondsPerByte(best), from_trainer);
      }
    }
    // On each host one member takes the bytes from a trainer rank or from
    // another host (no faster than the best trainer replica offers it); the
    // others at their best. A contained unit: all at their best (a holder
    // of a container may be on the host), and no trainer term.
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
    for (int k = 0; k < kNumLinkClasses; ++k) {
      if (sender_bytes[k] > 0) sender.AddTrainer(cands[*b], static_cast<LinkClass>(k), sender_bytes[k]);
    }
    if (!contained) trainer.Add(cands[*b], unit_best, bytes);
    for (int32_t h : holder_slots) holders_on[h].clear();
    holder_slots.clear();
  }
  *sender_bound = sender.Bound(cost);
  double bound = trainer.Bound(cost);
  for (const LinkBytes& l : dst_load) bound = std::max(bound, cost.Seconds(l));
  for (size_t h = 0; h < host_seconds.size(); ++h) {
    bound = std::max(bound, host_seconds[h] / ranks_on[h]);
  }
  bound = std::max(bound, TrainerHostsExitBound(candidates, units, containers, src, dst, cost,
                                                on_trainer_host));
  if (known) {
    bound = std::max(bound, HolderSetBound(units, containers, member_rank, slot_of, dst_load,
                                           entry_links, candidates, cost));
  }
  return std::max(bound, EntryBound(candidates, units, containers, member_rank, slot_of,
                                    dst_load, entry_links, cost));
}

}  // namespace internal_plan
}  // namespace refit
