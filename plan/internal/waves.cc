// Waves: next-fit scheduling of messages under the staging budget.
#include "plan/internal/waves.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "plan/internal/budgets.h"

namespace refit {
namespace internal_plan {
namespace {

// Returns `in` reordered stably by key(i) in [0, num_keys).
template <typename Key>
std::vector<int32_t> StableCountingOrder(const std::vector<int32_t>& in,
                                         int32_t num_keys, Key key) {
  std::vector<int32_t> first(static_cast<size_t>(num_keys) + 1, 0);
  for (int32_t i : in) ++first[key(i) + 1];
  for (int32_t k = 0; k < num_keys; ++k) first[k + 1] += first[k];
  std::vector<int32_t> out(in.size());
  for (int32_t i : in) out[first[key(i)]++] = i;
  return out;
}

// Sorts by `less` each maximal run of *order whose neighbours are `same`,
// unless the run is already sorted.
template <typename Same, typename Less>
void SortRuns(std::vector<int32_t>* order, Same same, Less less) {
  std::vector<int32_t>& o = *order;
  for (size_t i = 0; i < o.size();) {
    size_t e = i + 1;
    bool sorted = true;
    for (; e < o.size() && same(o[e - 1], o[e]); ++e) {
      sorted = sorted && less(o[e - 1], o[e]);
    }
    if (!sorted) std::sort(o.begin() + i, o.begin() + e, less);
    i = e;
  }
}

}  // namespace

void ScheduleWaves(const PlannerOptions& options, int32_t src_world,
                    int32_t dst_world, std::vector<PendingMessage>* messages,
                    std::vector<Wave>* waves) {
  std::vector<PendingMessage>& msgs = *messages;
  const int64_t lane_budget = LaneBudget(options);
  std::vector<int32_t> stages;
  for (const PendingMessage& m : msgs) {
    if (stages.empty() || stages.back() != m.stage) stages.push_back(m.stage);
  }
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  // stage_pos[i]: the index in `stages` of message i's stage.
  std::vector<int32_t> stage_pos(msgs.size());
  {
    absl::flat_hash_map<int32_t, int32_t> pos;
    for (size_t si = 0; si < stages.size(); ++si) {
      pos[stages[si]] = static_cast<int32_t>(si);
    }
    for (size_t i = 0; i < msgs.size(); ++i) stage_pos[i] = pos[msgs[i].stage];
  }
  // Placement order (stage, seq, src rank, dst rank): stable counting
  // sorts (by seq, then by stage) of the messages in pair order, then any
  // run of equal (stage, seq) not yet in (src, dst) order sorted.
  std::vector<int32_t> order(msgs.size());
  std::iota(order.begin(), order.end(), 0);
  {
    int32_t max_seq = 0;
    for (const PendingMessage& m : msgs) max_seq = std::max(max_seq, m.seq);
    order = StableCountingOrder(order, max_seq + 1,
                                [&](int32_t i) { return msgs[i].seq; });
    order = StableCountingOrder(order, static_cast<int32_t>(stages.size()),
                                [&](int32_t i) { return stage_pos[i]; });
    SortRuns(&order,
             [&](int32_t a, int32_t b) {
               return msgs[a].stage == msgs[b].stage && msgs[a].seq == msgs[b].seq;
             },
             [&](int32_t a, int32_t b) {
               const PendingMessage& x = msgs[a];
               const PendingMessage& y = msgs[b];
               return std::make_tuple(x.m.src_rank, x.m.dst_rank) <
                      std::make_tuple(y.m.src_rank, y.m.dst_rank);
             });
  }
  // local wave index per message, per stage.
  const int64_t wave_cap = WaveCap(options);
  std::vector<int32_t> local_wave(msgs.size(), 0);
  std::vector<int32_t> waves_in_stage(stages.size(), 0);
  {
    // Per rank and wave: staged bytes (<= lane_budget) and all bytes
    // (<= wave_cap; a bigger message gets an empty wave).
    struct Use {
      int64_t staged = 0;
      int64_t all = 0;
    };
    size_t i = 0;
    // Per stage (cleared for the next one, keeping their rows' room).
    std::vector<std::vector<Use>> suse(src_world), duse(dst_world);
    for (size_t si = 0; si < stages.size(); ++si) {
      for (std::vector<Use>& row : suse) row.clear();
      for (std::vector<Use>& row : duse) row.clear();
      std::vector<int32_t> sstart(src_world, 0), dstart(dst_world, 0);
      absl::flat_hash_map<int64_t, int32_t> pair_last;
      int32_t nwaves = 0;
      auto use = [](std::vector<Use>& v, int32_t r) -> Use& {
        if (static_cast<int32_t>(v.size()) <= r) v.resize(r + 1);
        return v[r];
      };
      auto fits = [&](const Use& u, int64_t staged, int64_t all) {
        if (u.all == 0 && all > wave_cap) return true;  // a wave of its own
        return u.staged + staged <= lane_budget && u.all + all <= wave_cap;
      };
      auto full = [&](const Use& u) {
        return u.staged >= lane_budget || u.all >= wave_cap;
      };
      for (; i < order.size() && msgs[order[i]].stage == stages[si]; ++i) {
        const PendingMessage& mm = msgs[order[i]];
        const int32_t s = mm.m.src_rank, d = mm.m.dst_rank;
        const int64_t sc = mm.m.src_contiguous ? 0 : mm.m.bytes;
        const int64_t dc = mm.m.dst_contiguous ? 0 : mm.m.bytes;
        const int64_t key = int64_t{s} * dst_world + d;
        auto pl = pair_last.find(key);
        // A pair's messages keep their order: never before its last wave.
        int32_t r = std::max(sstart[s], dstart[d]);
        if (pl != pair_last.end()) r = std::max(r, pl->second);
        while (true) {
          const bool sfull = !fits(use(suse[s], r), sc, mm.m.bytes);
          const bool dfull = !fits(use(duse[d], r), dc, mm.m.bytes);
          if (!sfull && !dfull) break;
          // Next fit: a rank does not return to a wave that one of its
          // messages did not fit in (keeps this loop linear).
          if (sfull) sstart[s] = std::max(sstart[s], r + 1);
          if (dfull) dstart[d] = std::max(dstart[d], r + 1);
          ++r;
        }
        Use& su = use(suse[s], r);
        su.staged += sc;
        su.all += mm.m.bytes;
        Use& du = use(duse[d], r);
        du.staged += dc;
        du.all += mm.m.bytes;
        while (sstart[s] < static_cast<int32_t>(suse[s].size()) &&
               full(suse[s][sstart[s]])) {
          ++sstart[s];
        }
        while (dstart[d] < static_cast<int32_t>(duse[d].size()) &&
               full(duse[d][dstart[d]])) {
          ++dstart[d];
        }
        pair_last[key] = r;
        local_wave[order[i]] = r;
        nwaves = std::max(nwaves, r + 1);
      }
      waves_in_stage[si] = nwaves;
    }
  }
  // Global order: interleave stages (wave k of each stage, stage order).
  std::vector<std::vector<int32_t>> global_of(stages.size());
  int32_t nglobal = 0;
  {
    int32_t maxr = 0;
    for (int32_t n : waves_in_stage) maxr = std::max(maxr, n);
    for (size_t si = 0; si < stages.size(); ++si) {
      global_of[si].assign(waves_in_stage[si], -1);
    }
    for (int32_t k = 0; k < maxr; ++k) {
      for (size_t si = 0; si < stages.size(); ++si) {
        if (k < waves_in_stage[si]) {
          global_of[si][k] = nglobal++;
          Wave r;
          r.stage = stages[si];
          r.lane = stages.size() >= 2 ? stages[si] % options.num_lanes
                                      : k % options.num_lanes;
          waves->push_back(r);
        }
      }
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    msgs[i].m.wave = global_of[stage_pos[i]][local_wave[i]];
  }
}

RankWaveTable RankWaveUseOf(int32_t dst_world, int32_t num_waves,
                            const std::vector<PendingMessage>& placed) {
  RankWaveTable use(dst_world);
  for (std::vector<RankWaveUse>& row : use) row.resize(num_waves);
  auto add = [&](int32_t e, int32_t w, int64_t staged, int64_t in, int64_t out) {
    if (static_cast<int32_t>(use[e].size()) <= w) use[e].resize(w + 1);
    RankWaveUse& u = use[e][w];
    u.staged += staged;
    u.in += in;
    u.out += out;
  };
  for (const PendingMessage& pm : placed) {
    const Message& m = pm.m;
    add(m.dst_rank, m.wave, m.dst_contiguous ? 0 : m.bytes, m.bytes, 0);
    if (m.relay) add(m.src_rank, m.wave, m.src_contiguous ? 0 : m.bytes, 0, m.bytes);
  }
  return use;
}

void ScheduleRelayWaves(const PlannerOptions& options, int32_t dst_world,
                        const std::vector<int32_t>& ready,
                        std::vector<PendingMessage>* relays, RankWaveTable* use_table,
                        std::vector<Wave>* waves) {
  const int64_t lane_budget = LaneBudget(options);
  const int64_t wave_cap = WaveCap(options);
  // A relay forwards wave k's bytes in wave k+1 while it receives wave
  // k+1's, so forwarding overlaps the trainer's sends.
  using Use = RankWaveUse;
  RankWaveTable& use = *use_table;
  auto at = [&](int32_t e, int32_t w) -> Use& {
    if (static_cast<int32_t>(use[e].size()) <= w) use[e].resize(w + 1);
    return use[e][w];
  };
  auto add = [&](int32_t e, int32_t w, int64_t staged, int64_t in, int64_t out) {
    Use& u = at(e, w);
    u.staged += staged;
    u.in += in;
    u.out += out;
  };
  std::vector<PendingMessage>& msgs = *relays;
  std::vector<int32_t> order(msgs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Message& x = msgs[a].m;
    const Message& y = msgs[b].m;
    return std::make_tuple(ready[a], msgs[a].seq, x.src_rank, x.dst_rank) <
           std::make_tuple(ready[b], msgs[b].seq, y.src_rank, y.dst_rank);
  });
  // A delta plan's relay holds what it receives and what it forwards in a
  // wave in one lane room of half the lane's share (exec/delta/delta_room.h),
  // so there a rank's bytes both ways count together, as in the trainer's
  // waves, and its staging within half the lane.
  const int64_t stage_cap = options.delta ? std::max<int64_t>(1, lane_budget / 2) : lane_budget;
  // `dir`: the rank's bytes that way in this wave (u.in or u.out).
  auto fits = [&](const Use& u, int64_t dir, int64_t staged, int64_t bytes) {
    if (options.delta) dir = u.in + u.out;
    if (dir == 0 && u.staged == 0 && bytes > wave_cap) return true;  // a wave of its own
    return u.staged + staged <= stage_cap && dir + bytes <= wave_cap;
  };
  absl::flat_hash_map<int64_t, int32_t> pair_last;
  for (int32_t i : order) {
    Message& m = msgs[i].m;
    const int32_t s = m.src_rank, d = m.dst_rank;
    const int64_t sc = m.src_contiguous ? 0 : m.bytes;
    const int64_t dc = m.dst_contiguous ? 0 : m.bytes;
    const int64_t key = int64_t{s} * dst_world + d;
    int32_t r = ready[i];
    auto pl = pair_last.find(key);
    if (pl != pair_last.end()) r = std::max(r, pl->second);
    while (!fits(at(s, r), at(s, r).out, sc, m.bytes) ||
           !fits(at(d, r), at(d, r).in, dc, m.bytes)) {
      ++r;
    }
    add(s, r, sc, 0, m.bytes);
    add(d, r, dc, m.bytes, 0);
    pair_last[key] = r;
    m.wave = r;
    while (static_cast<int32_t>(waves->size()) <= r) {
      Wave w;
      w.lane = static_cast<int32_t>(waves->size()) % options.num_lanes;
      waves->push_back(w);
    }
  }
}

void EmitMessages(const std::vector<PendingMessage>& msgs, Plan* plan) {
  // (wave, src rank, dst rank, seq): a stable counting sort by wave of
  // the messages in pair order, then any wave's run not yet in (src, dst,
  // seq) order sorted.
  std::vector<int32_t> order(msgs.size());
  std::iota(order.begin(), order.end(), 0);
  order = StableCountingOrder(order, static_cast<int32_t>(plan->waves.size()),
                              [&](int32_t i) { return msgs[i].m.wave; });
  SortRuns(&order,
           [&](int32_t a, int32_t b) { return msgs[a].m.wave == msgs[b].m.wave; },
           [&](int32_t a, int32_t b) {
             const PendingMessage& x = msgs[a];
             const PendingMessage& y = msgs[b];
             return std::make_tuple(x.m.relay, x.m.src_rank, x.m.dst_rank, x.seq) <
                    std::make_tuple(y.m.relay, y.m.src_rank, y.m.dst_rank, y.seq);
           });
  plan->messages.reserve(msgs.size());
  for (int32_t oi : order) {
    const Message& m = msgs[oi].m;
    Wave& r = plan->waves[m.wave];
    if (r.num_messages == 0) {
      r.first_message = static_cast<int32_t>(plan->messages.size());
    }
    ++r.num_messages;
    plan->messages.push_back(m);
  }
}

}  // namespace internal_plan
}  // namespace refit
