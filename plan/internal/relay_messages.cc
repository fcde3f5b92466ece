// Relay messages: ordered by delivery, coalesced, placed after delivery.
#include "plan/internal/relay_messages.h"

#include <algorithm>

#include "common/status_macros.h"
#include "layout/box.h"
#include "plan/internal/segments.h"
#include "plan/internal/waves.h"

namespace refit {
namespace internal_plan {

absl::Status AddRelayMessages(const Candidates& candidates, const Sources& sources,
                              int64_t cap, int64_t direct_min, bool pipelined,
                              std::vector<int32_t>* segment_cand,
                              std::vector<PendingMessage>* messages, Plan* plan) {
  const std::vector<Candidate>& cands = candidates.cands;
  const int32_t src_world = plan->src.world_size;
  // Per candidate, where its segments (one per split, in split order,
  // side by side) start in plan->segments and how many there are; per
  // segment, the wave of the message that carries it.
  std::vector<int32_t> seg_first(cands.size(), -1), seg_count(cands.size(), 0);
  std::vector<int32_t> seg_wave;
  auto note = [&](const PendingMessage& pm) {
    const int32_t end = pm.m.first_segment + pm.m.num_segments;
    if (static_cast<int32_t>(seg_wave.size()) < end) seg_wave.resize(end, -1);
    for (int32_t q = pm.m.first_segment; q < end; ++q) {
      seg_wave[q] = pm.m.wave;
      const int32_t c = (*segment_cand)[q];
      if (seg_first[c] < 0) seg_first[c] = q;
      ++seg_count[c];
    }
  };
  for (const PendingMessage& pm : *messages) note(pm);
  // The first wave at which a relay may forward split `ordinal` of
  // candidate c's bytes, whose region is `box_of_key()`: one after the
  // wave that brought its feeder that region (the feeder's segment of the
  // same ordinal, when the feeder's bytes came as as many segments and
  // that one is of this region), or one after the last of the feeder's
  // segments that brought a part of it (a sub-region of a container's
  // region, relays.h); else one after every wave placed so far.
  auto ready_at = [&](int32_t c, int32_t ordinal, int32_t splits, const auto& box_of_key) {
    const int32_t f = sources.feeder[c];
    const int32_t all = static_cast<int32_t>(plan->waves.size());
    const int32_t q = seg_first[f] + ordinal;
    if (seg_count[f] == splits && (*segment_cand)[q] == f &&
        plan->segments[q].box == box_of_key()) {
      return seg_wave[q] + 1;
    }
    const Box box = box_of_key();
    int32_t ready = 0;
    int64_t covered = 0;
    for (int32_t p = seg_first[f]; p < seg_first[f] + seg_count[f]; ++p) {
      if ((*segment_cand)[p] != f) return all;
      const Box& part = plan->segments[p].box;
      if (!Intersects(part, box)) continue;
      ready = std::max(ready, seg_wave[p] + 1);
      covered += UncheckedNumElements(Intersect(part, box));
    }
    return covered == UncheckedNumElements(box) ? ready : all;
  };
  // What every placed message uses per engine rank and wave, kept up to
  // date as each level's relays are placed.
  RankWaveTable use = RankWaveUseOf(plan->dst.world_size, *messages);
  // The relayed candidates by level (in candidate order within one).
  std::vector<std::vector<int32_t>> at_level(sources.max_depth + 1);
  for (size_t i = 0; i < cands.size(); ++i) {
    const int32_t level = sources.depth[i];
    if (level > 0 && level <= sources.max_depth) at_level[level].push_back(static_cast<int32_t>(i));
  }
  std::vector<int32_t> sender(cands.size(), -1);
  for (int32_t level = 1; level <= sources.max_depth; ++level) {
    if (level > 1) {
      for (int32_t i : at_level[level - 1]) sender[i] = -1;
    }
    if (at_level[level].empty()) continue;
    for (int32_t i : at_level[level]) sender[i] = src_world + cands[sources.feeder[i]].dst_rank;
    SegmentKeys keys;
    REFIT_RETURN_IF_ERROR(
        OrderSegmentsOf(candidates, sender, at_level[level], plan->src, plan->dst, cap, &keys));
    std::vector<SegKey>& kv = keys.keys;
    auto box_of = [&](const SegKey& k) {
      if (k.split >= 0) return keys.split_boxes[k.split];
      const Candidate& c = cands[k.cand];
      return Intersect(candidates.PieceOf(c).box, plan->dst.records[c.dst_record].box);
    };
    // Each key's ready wave (a candidate's splits are side by side, in
    // split order), then each pair's keys by it (stable: then in
    // destination order).
    std::vector<std::pair<int32_t, SegKey>> ready_key(kv.size());
    for (size_t i = 0; i < kv.size();) {
      size_t e = i + 1;
      while (e < kv.size() && kv[e].cand == kv[i].cand) ++e;
      for (size_t j = i; j < e; ++j) {
        ready_key[j] = {ready_at(kv[i].cand, static_cast<int32_t>(j - i),
                                 static_cast<int32_t>(e - i),
                                 [&] { return box_of(kv[j]); }),
                        kv[j]};
      }
      i = e;
    }
    for (size_t i = 0; i < kv.size();) {
      size_t e = i + 1;
      while (e < kv.size() && kv[e].src_rank == kv[i].src_rank &&
             cands[kv[e].cand].dst_rank == cands[kv[i].cand].dst_rank) {
        ++e;
      }
      std::stable_sort(ready_key.begin() + i, ready_key.begin() + e,
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      i = e;
    }
    // Pipelined: a relay message forwards bytes of one delivering wave
    // (mixing waves would hold early bytes back until the last arrive).
    std::vector<int32_t> batch(kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
      batch[i] = ready_key[i].first;
      kv[i] = ready_key[i].second;
    }
    std::vector<PendingMessage> relays = CoalesceMessages(
        keys, candidates, sources, cap, direct_min, plan, segment_cand, &batch, pipelined);
    std::vector<int32_t> ready(relays.size());
    for (size_t i = 0; i < relays.size(); ++i) ready[i] = relays[i].batch;
    ScheduleRelayWaves(plan->options, plan->dst.world_size, ready, &relays, &use,
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
