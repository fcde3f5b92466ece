// Source choice with relays (see relays.h): same-GPU replicas, then one
// root per unit from the trainer side, then every other candidate from
// the trainer side or from an engine rank of its unit that holds it.
#include "plan/internal/relays.h"

#include <algorithm>
#include <tuple>

#include "plan/cost.h"
#include "plan/internal/bound.h"

namespace refit {
namespace internal_plan {
namespace {

// What one source for one candidate costs; smaller is better.
struct Option {
  double t = 0;       // the larger of both ranks' times after, at least the floor
  double spb = 0;     // seconds per byte of its link
  int32_t depth = 0;  // hops after the trainer side
  double t_send = 0;  // the sender's time after
  double t_recv = 0;  // the receiver's time after
  bool operator<(const Option& o) const {
    return std::tie(t, spb, depth, t_send, t_recv) <
           std::tie(o.t, o.spb, o.depth, o.t_send, o.t_recv);
  }
};

// Per-rank loads: trainer egress, engine ingress and engine egress.
class Loads {
 public:
  Loads(const CostModel& cost, int32_t src_world, int32_t dst_world)
      : cost_(cost), src_out_(src_world), in_(dst_world), out_(dst_world) {}

  // The option of trainer rank r sending b bytes to engine rank d.
  Option Direct(int32_t r, int32_t d, int64_t b, double floor) const {
    const LinkClass lc = cost_.ClassOf(r, d);
    Option o;
    o.spb = cost_.SecondsPerByte(lc);
    o.t_send = cost_.SecondsWith(src_out_[r], lc, b);
    o.t_recv = std::max(cost_.SecondsWith(in_[d], lc, b), cost_.Seconds(out_[d]));
    o.t = std::max({o.t_send, o.t_recv, floor});
    return o;
  }
  // The option of engine rank e forwarding b bytes to engine rank d.
  Option Relay(int32_t e, int32_t d, int64_t b, int32_t depth, double floor) const {
    const LinkClass lc = cost_.EngineClassOf(e, d);
    Option o;
    o.spb = cost_.SecondsPerByte(lc);
    o.depth = depth;
    o.t_send = std::max(cost_.Seconds(in_[e]), cost_.SecondsWith(out_[e], lc, b));
    o.t_recv = std::max(cost_.SecondsWith(in_[d], lc, b), cost_.Seconds(out_[d]));
    o.t = std::max({o.t_send, o.t_recv, floor});
    return o;
  }
  void AddDirect(int32_t r, int32_t d, int64_t b) {
    const LinkClass lc = cost_.ClassOf(r, d);
    src_out_[r].Add(lc, b);
    in_[d].Add(lc, b);
  }
  void AddRelay(int32_t e, int32_t d, int64_t b) {
    const LinkClass lc = cost_.EngineClassOf(e, d);
    out_[e].Add(lc, b);
    in_[d].Add(lc, b);
  }
  // Returns the slowest rank's time.
  double Slowest() const {
    double t = 0;
    for (const LinkBytes& l : src_out_) t = std::max(t, cost_.Seconds(l));
    for (const LinkBytes& l : in_) t = std::max(t, cost_.Seconds(l));
    for (const LinkBytes& l : out_) t = std::max(t, cost_.Seconds(l));
    return t;
  }
  // Adds the bytes sent per link class (trainer and engine senders) to
  // *stats.
  void CountLinks(PlanStats* stats) const {
    for (const auto* side : {&src_out_, &out_}) {
      for (const LinkBytes& l : *side) {
        stats->same_gpu_bytes += l.bytes[static_cast<int>(LinkClass::kSameGpu)];
        stats->intra_host_bytes += l.bytes[static_cast<int>(LinkClass::kSameHost)];
        stats->inter_host_bytes += l.bytes[static_cast<int>(LinkClass::kInterHost)];
      }
    }
  }
  double SrcTime(int32_t r) const { return cost_.Seconds(src_out_[r]); }
  double InTime(int32_t d) const { return cost_.Seconds(in_[d]); }

 private:
  const CostModel& cost_;
  std::vector<LinkBytes> src_out_, in_, out_;
};

}  // namespace

Sources ChooseRelaySources(const Candidates& candidates, const SideLayout& src,
                           const SideLayout& dst, const PlannerOptions& options,
                           PlanStats* stats) {
  const CostModel cost(src, dst, options);
  const std::vector<Candidate>& cands = candidates.cands;
  const Units units = GroupUnits(candidates);
  Sources s;
  s.choice.assign(cands.size(), -1);
  s.feeder.assign(cands.size(), -1);
  s.depth.assign(cands.size(), 0);
  std::vector<char> fed(cands.size(), 0);
  std::vector<char> unit_fed(units.size(), 0);
  Loads loads(cost, src.world_size, dst.world_size);
  auto members = [&](int32_t u) {
    return std::make_pair(units.members.data() + units.first[u],
                          units.members.data() + units.first[u + 1]);
  };
  // 1. Replicas on the dst rank's own GPU.
  for (int32_t u = 0; u < units.size(); ++u) {
    const auto [b, e] = members(u);
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[*b]).ranks;
    for (const int32_t* m = b; m != e; ++m) {
      const int32_t d = cands[*m].dst_rank;
      int32_t best = -1;
      for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
        if (cost.ClassOf(ranks[k], d) != LinkClass::kSameGpu) continue;
        if (best < 0 || loads.SrcTime(ranks[k]) < loads.SrcTime(ranks[best])) best = k;
      }
      if (best < 0) continue;
      s.choice[*m] = best;
      fed[*m] = 1;
      unit_fed[u] = 1;
      loads.AddDirect(ranks[best], d, cands[*m].bytes);
    }
  }
  stats->sender_lower_bound_seconds = SenderLowerBound(candidates, src, dst, cost);
  const double bound = RelayLowerBound(candidates, units, src, dst, cost);
  double floor = std::max(bound, loads.Slowest());
  // Units by bytes descending, then first dst record.
  std::vector<std::tuple<int64_t, int32_t, int32_t>> order;
  order.reserve(units.size());
  for (int32_t u = 0; u < units.size(); ++u) {
    const Candidate& c = cands[*members(u).first];
    order.emplace_back(-c.bytes, c.dst_record, u);
  }
  std::sort(order.begin(), order.end());
  // Whether some trainer rank and some engine rank share a host (then a
  // pair's link class depends on both ranks).
  bool shared_hosts = false;
  if (cost.placement_known()) {
    std::vector<int32_t> th(src.host_of_rank.begin(), src.host_of_rank.end());
    std::sort(th.begin(), th.end());
    for (int32_t h : dst.host_of_rank) {
      shared_hosts = shared_hosts || std::binary_search(th.begin(), th.end(), h);
    }
  }
  // 2. One root per unit from the trainer side.
  for (const auto& [neg_bytes, unused, u] : order) {
    if (unit_fed[u]) continue;
    const auto [b, e] = members(u);
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[*b]).ranks;
    Option best;
    int32_t best_m = -1, best_k = -1;
    // Without hosts shared by the two sides every pair is one class: the
    // best pair is the least loaded replica with the least loaded member
    // (the same rule, in N + R steps instead of N * R).
    const bool one_class = !shared_hosts;
    const int32_t* m_first = b;
    const int32_t* m_last = e;
    if (one_class) {
      for (const int32_t* m = b; m != e; ++m) {
        if (loads.InTime(cands[*m].dst_rank) < loads.InTime(cands[*m_first].dst_rank)) m_first = m;
      }
      m_last = m_first + 1;
    }
    for (const int32_t* m = m_first; m != m_last; ++m) {
      for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
        const Option o = loads.Direct(ranks[k], cands[*m].dst_rank, -neg_bytes, floor);
        if (best_m < 0 || o < best) {
          best = o;
          best_m = *m;
          best_k = k;
        }
      }
    }
    s.choice[best_m] = best_k;
    fed[best_m] = 1;
    loads.AddDirect(ranks[best_k], cands[best_m].dst_rank, -neg_bytes);
    floor = std::max({floor, best.t_send, best.t_recv});
  }
  // 3. The others, from the trainer side or from a holder of their unit:
  // host by host (in order of their first candidate), on each host the
  // candidate whose rank has received least first (it takes the bytes
  // into the host; the others then find a holder on their host).
  std::vector<std::tuple<int32_t, double, int32_t>> todo;  // (host slot, in time, cand)
  std::vector<int32_t> hosts;
  for (const auto& [neg_bytes, unused, u] : order) {
    const int64_t bytes = -neg_bytes;
    const auto [b, e] = members(u);
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[*b]).ranks;
    todo.clear();
    hosts.clear();
    for (const int32_t* m = b; m != e; ++m) {
      if (fed[*m]) continue;
      const int32_t h = cost.EngineHost(cands[*m].dst_rank);
      const int32_t slot = static_cast<int32_t>(
          std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
      if (slot == static_cast<int32_t>(hosts.size())) hosts.push_back(h);
      todo.emplace_back(slot, loads.InTime(cands[*m].dst_rank), *m);
    }
    std::sort(todo.begin(), todo.end());
    for (const auto& [slot, in_time, mi] : todo) {
      const int32_t* m = &mi;
      const int32_t d = cands[*m].dst_rank;
      Option best;
      int32_t best_k = -1, best_h = -1;
      for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
        const Option o = loads.Direct(ranks[k], d, bytes, floor);
        if (best_k < 0 || o < best) {
          best = o;
          best_k = k;
        }
      }
      for (const int32_t* h = b; h != e; ++h) {
        if (!fed[*h] || cands[*h].dst_rank == d || s.depth[*h] >= kMaxRelayDepth) continue;
        const Option o = loads.Relay(cands[*h].dst_rank, d, bytes, s.depth[*h] + 1, floor);
        if (o < best) {
          best = o;
          best_h = *h;
        }
      }
      fed[*m] = 1;
      floor = std::max({floor, best.t_send, best.t_recv});
      if (best_h < 0) {
        s.choice[*m] = best_k;
        loads.AddDirect(ranks[best_k], d, bytes);
        continue;
      }
      s.feeder[*m] = best_h;
      s.depth[*m] = static_cast<int8_t>(s.depth[best_h] + 1);
      s.max_depth = std::max<int32_t>(s.max_depth, s.depth[*m]);
      loads.AddRelay(cands[best_h].dst_rank, d, bytes);
    }
  }
  stats->predicted_seconds = loads.Slowest();
  stats->lower_bound_seconds = bound;
  stats->relay_depth = s.max_depth;
  loads.CountLinks(stats);
  return s;
}

}  // namespace internal_plan
}  // namespace refit
