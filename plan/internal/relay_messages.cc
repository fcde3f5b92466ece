// Relay messages: ordered by delivery, coalesced, placed after delivery.
#include "plan/internal/relay_messages.h"

#include <algorithm>

#include "common/status_macros.h"
#include "plan/internal/segments.h"
#include "plan/internal/waves.h"

namespace refit {
namespace internal_plan {

absl::Status AddRelayMessages(const Candidates& candidates, const Sources& sources,
                              int64_t cap, int64_t direct_min,
                              std::vector<int32_t>* segment_cand,
                              std::vector<PendingMessage>* messages, Plan* plan) {
  const std::vector<Candidate>& cands = candidates.cands;
  const int32_t src_world = plan->src.world_size;
  // delivered[c]: the last wave that writes candidate c's bytes.
  std::vector<int32_t> delivered(cands.size(), -1);
  auto note = [&](const PendingMessage& pm) {
    for (int32_t q = pm.m.first_segment; q < pm.m.first_segment + pm.m.num_segments; ++q) {
      int32_t& d = delivered[(*segment_cand)[q]];
      d = std::max(d, pm.m.wave);
    }
  };
  for (const PendingMessage& pm : *messages) note(pm);
  for (int32_t level = 1; level <= sources.max_depth; ++level) {
    std::vector<int32_t> sender(cands.size(), -1);
    bool any = false;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (sources.depth[i] != level) continue;
      sender[i] = src_world + cands[sources.feeder[i]].dst_rank;
      any = true;
    }
    if (!any) continue;
    SegmentKeys keys;
    REFIT_RETURN_IF_ERROR(
        OrderSegments(candidates, sender, plan->src, plan->dst, cap, &keys));
    auto ready_of = [&](const SegKey& k) { return delivered[sources.feeder[k.cand]] + 1; };
    // Each pair's keys by the wave their bytes arrive in (stable: then in
    // destination order).
    std::vector<SegKey>& kv = keys.keys;
    for (size_t i = 0; i < kv.size();) {
      size_t e = i + 1;
      while (e < kv.size() && kv[e].src_rank == kv[i].src_rank &&
             cands[kv[e].cand].dst_rank == cands[kv[i].cand].dst_rank) {
        ++e;
      }
      std::stable_sort(kv.begin() + i, kv.begin() + e, [&](const SegKey& x, const SegKey& y) {
        return ready_of(x) < ready_of(y);
      });
      i = e;
    }
    std::vector<PendingMessage> relays = CoalesceMessages(
        keys, candidates, sources, cap, direct_min, plan, segment_cand);
    std::vector<int32_t> ready(relays.size(), 0);
    for (size_t i = 0; i < relays.size(); ++i) {
      const Message& m = relays[i].m;
      for (int32_t q = m.first_segment; q < m.first_segment + m.num_segments; ++q) {
        ready[i] = std::max(ready[i], delivered[sources.feeder[(*segment_cand)[q]]] + 1);
      }
    }
    ScheduleRelayWaves(plan->options, plan->dst.world_size, *messages, ready, &relays,
                       &plan->waves);
    for (const PendingMessage& pm : relays) {
      note(pm);
      messages->push_back(pm);
    }
  }
  return absl::OkStatus();
}

}  // namespace internal_plan
}  // namespace refit
