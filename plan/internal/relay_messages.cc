// Relay messages: ordered by delivery, coalesced, placed after delivery.
#include "plan/internal/relay_messages.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/status_macros.h"
#include "layout/box.h"
#include "plan/internal/segments.h"
#include "plan/internal/waves.h"

namespace refit {
namespace internal_plan {

namespace {

// Returns the relayed candidates (depth > 0) by depth, in candidate order
// within one.
std::vector<std::vector<int32_t>> RelayedByLevel(const Sources& sources) {
  std::vector<std::vector<int32_t>> at_level(sources.max_depth + 1);
  for (size_t i = 0; i < sources.depth.size(); ++i) {
    const int32_t level = sources.depth[i];
    if (level > 0 && level <= sources.max_depth) at_level[level].push_back(static_cast<int32_t>(i));
  }
  return at_level;
}

// The segments of the candidates that feed relays (Sources::feeder): per
// such candidate, its segments' indices in plan->segments with the waves
// of their messages, in the order noted.
class FeederSegments {
 public:
  struct Noted {
    int32_t segment;
    int32_t wave;
  };

  // The feeders of the candidates of `at_level` (RelayedByLevel), of
  // `num_cands` candidates in all.
  FeederSegments(const Sources& sources, const std::vector<std::vector<int32_t>>& at_level,
                 size_t num_cands)
      : feeds_(num_cands, false), slot_(num_cands, -1) {
    int32_t n = 0;
    for (const std::vector<int32_t>& relayed : at_level) {
      for (int32_t i : relayed) {
        const int32_t f = sources.feeder[i];
        if (slot_[f] < 0) slot_[f] = n++;
        feeds_[f] = true;
      }
    }
    span_.assign(n, Span{0, 0});
  }

  // Notes the segments of `msgs`, whose candidates are `segment_cand`'s
  // entries: one batch, no candidate having segments noted before.
  void Note(const std::vector<PendingMessage>& msgs, const std::vector<int32_t>& segment_cand) {
    // The batch's segments of feeders, in the order noted, then placed
    // side by side per feeder (a counting sort, keeping that order).
    batch_.clear();
    for (const PendingMessage& pm : msgs) {
      const int32_t end = pm.m.first_segment + pm.m.num_segments;
      for (int32_t q = pm.m.first_segment; q < end; ++q) {
        const int32_t c = segment_cand[q];
        if (feeds_[c]) batch_.push_back(Pending{slot_[c], Noted{q, pm.m.wave}});
      }
    }
    touched_.clear();
    for (const Pending& p : batch_) {
      if (span_[p.slot].count++ == 0) touched_.push_back(p.slot);
    }
    int32_t at = static_cast<int32_t>(noted_.size());
    for (int32_t k : touched_) {
      span_[k].first = at;
      at += span_[k].count;
      span_[k].count = 0;
    }
    noted_.resize(at);
    for (const Pending& p : batch_) {
      Span& sp = span_[p.slot];
      noted_[sp.first + sp.count++] = p.noted;
    }
  }

  // Returns candidate c's noted segments (none unless it feeds relays).
  absl::Span<const Noted> Of(int32_t c) const {
    if (slot_[c] < 0) return {};
    const Span& sp = span_[slot_[c]];
    return absl::Span<const Noted>(noted_.data() + sp.first, sp.count);
  }

 private:
  struct Span {
    int32_t first;
    int32_t count;
  };
  // Per candidate, whether it feeds a relay (slot_ >= 0; a bitmap that
  // stays in cache where slot_ would not) and its entry in span_ (-1: it
  // feeds no relay).
  std::vector<bool> feeds_;
  std::vector<int32_t> slot_;
  std::vector<Span> span_;  // per feeder: its range of noted_
  std::vector<Noted> noted_;
  struct Pending {
    int32_t slot;
    Noted noted;
  };
  std::vector<Pending> batch_;  // Note's scratch
  std::vector<int32_t> touched_;
};

// Returns the wave of segment q among `noted` (-1: not one of them).
int32_t WaveOf(absl::Span<const FeederSegments::Noted> noted, int32_t q) {
  if (!noted.empty()) {
    const int64_t k = int64_t{q} - noted[0].segment;
    if (k >= 0 && k < static_cast<int64_t>(noted.size()) && noted[k].segment == q) {
      return noted[k].wave;
    }
  }
  for (const auto& n : noted) {
    if (n.segment == q) return n.wave;
  }
  return -1;
}

}  // namespace

absl::Status AddRelayMessages(const Candidates& candidates, const Sources& sources,
                              int64_t cap, int64_t direct_min, bool pipelined,
                              std::vector<int32_t>* segment_cand,
                              std::vector<PendingMessage>* messages, Plan* plan) {
  const std::vector<Candidate>& cands = candidates.cands;
  const int32_t src_world = plan->src.world_size;
  // The relayed candidates by level (in candidate order within one).
  const std::vector<std::vector<int32_t>> at_level = RelayedByLevel(sources);
  // The segments of every feeder (one per split, in split order, side by
  // side) and the waves of the messages that carry them.
  FeederSegments fed(sources, at_level, cands.size());
  fed.Note(*messages, *segment_cand);
  // The first wave at which a relay may forward split `ordinal` of
  // candidate c's bytes, whose region is `box_of_key()`: one after the
  // wave that brought its feeder that region (the feeder's segment of the
  // same ordinal, when the feeder's bytes came as as many segments and
  // that one is of this region), or one after the last of the feeder's
  // segments that brought a part of it (a sub-region of a container's
  // region, relays.h); else one after every wave placed so far.
  auto ready_at = [&](int32_t c, int32_t ordinal, int32_t splits, const auto& box_of_key,
                      const auto& is_key_box) {
    const int32_t f = sources.feeder[c];
    const int32_t all = static_cast<int32_t>(plan->waves.size());
    const absl::Span<const FeederSegments::Noted> noted = fed.Of(f);
    const int32_t first = noted.empty() ? -1 : noted[0].segment;
    const int32_t count = static_cast<int32_t>(noted.size());
    if (count == splits) {
      const int32_t wave = WaveOf(noted, first + ordinal);
      if (wave >= 0 && is_key_box(plan->segments[first + ordinal].box, count)) return wave + 1;
    }
    const Box box = box_of_key();
    int32_t ready = 0;
    int64_t covered = 0;
    for (int32_t p = first; p < first + count; ++p) {
      const int32_t wave = WaveOf(noted, p);
      if (wave < 0) return all;
      const Box& part = plan->segments[p].box;
      if (!Intersects(part, box)) continue;
      ready = std::max(ready, wave + 1);
      covered += UncheckedNumElements(Intersect(part, box));
    }
    return covered == UncheckedNumElements(box) ? ready : all;
  };
  // What every placed message uses per engine rank and wave, kept up to
  // date as each level's relays are placed.
  RankWaveTable use = RankWaveUseOf(plan->dst.world_size,
                                    static_cast<int32_t>(plan->waves.size()), *messages);
  std::vector<int32_t> sender;
  for (int32_t level = 1; level <= sources.max_depth; ++level) {
    if (at_level[level].empty()) continue;
    sender.clear();
    for (int32_t i : at_level[level]) sender.push_back(src_world + cands[sources.feeder[i]].dst_rank);
    SegmentKeys keys;
    REFIT_RETURN_IF_ERROR(
        OrderSegmentsOf(candidates, at_level[level], sender, plan->src, plan->dst, cap, &keys));
    std::vector<SegKey>& kv = keys.keys;
    auto box_of = [&](const SegKey& k) {
      if (k.split >= 0) return keys.split_boxes[k.split];
      const Candidate& c = cands[k.cand];
      return Intersect(candidates.PieceOf(c).box, plan->dst.records[c.dst_record].box);
    };
    // Whether `b`, one of the feeder's segments, is key k's box (box_of(k)
    // == b), without building it. A whole key whose feeder came as one
    // segment (its whole region) of the same group (Candidate::unit: one
    // source piece, equal destination boxes) has that segment's box,
    // known without reading either box.
    auto is_box_of = [&](const SegKey& k, const Box& b, int32_t feeder_segments) {
      if (k.split >= 0) return keys.split_boxes[k.split] == b;
      if (feeder_segments == 1 && cands[k.cand].unit == cands[sources.feeder[k.cand]].unit) {
        return true;
      }
      const Candidate& c = cands[k.cand];
      return IsIntersection(candidates.PieceOf(c).box, plan->dst.records[c.dst_record].box, b);
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
                                 [&] { return box_of(kv[j]); },
                                 [&](const Box& b, int32_t feeder_segments) {
                                   return is_box_of(kv[j], b, feeder_segments);
                                 }),
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
    fed.Note(relays, *segment_cand);
    messages->insert(messages->end(), relays.begin(), relays.end());
  }
  return absl::OkStatus();
}

}  // namespace internal_plan
}  // namespace refit
