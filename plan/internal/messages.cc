// Messages: coalescing each pair's segments.
#include "plan/internal/messages.h"

#include <algorithm>
#include <utility>

#include "layout/dtype.h"
#include "plan/internal/segment_range.h"

namespace refit {
namespace internal_plan {

std::vector<PendingMessage> CoalesceMessages(const SegmentKeys& segment_keys,
                                             const Candidates& candidates,
                                             const Sources& sources,
                                             int64_t cap, int64_t direct_min,
                                             Plan* plan,
                                             std::vector<int32_t>* segment_cand,
                                             const std::vector<int32_t>* batch,
                                             bool split_batches) {
  // The layouts as normalized (plan->src, plan->dst).
  const SideLayout& ns = plan->src;
  const SideLayout& nd = plan->dst;
  const std::vector<Candidate>& cands = candidates.cands;
  const std::vector<TensorPieces>& pieces = candidates.pieces;
  const std::vector<SegKey>& keys = segment_keys.keys;
  const std::vector<Box>& split_boxes = segment_keys.split_boxes;
  auto seg_box = [&](const SegKey& k) {
    if (k.split >= 0) return split_boxes[k.split];
    const Candidate& c = cands[k.cand];
    return Intersect(pieces[c.src_tensor].pieces[c.piece].box,
                     nd.records[c.dst_record].box);
  };
  const int32_t src_world = ns.world_size;
  auto src_record_of = [&](const SegKey& k) {
    if (k.src_rank >= src_world) return cands[sources.feeder[k.cand]].dst_record;
    const Candidate& c = cands[k.cand];
    return pieces[c.src_tensor].pieces[c.piece].replicas[sources.choice[k.cand]];
  };
  bool relay = false;  // the pair being coalesced is a relay
  auto dst_rank_of = [&](const SegKey& k) { return cands[k.cand].dst_rank; };
  auto stage_of = [&](int32_t src_rank) {
    return ns.stage_of_rank.empty() ? 0 : ns.stage_of_rank[src_rank];
  };
  std::vector<PendingMessage> msgs;
  // At most one message per segment; only the pages used are touched.
  msgs.reserve(keys.size());
  plan->segments.reserve(plan->segments.size() + keys.size());
  {
    // When a segment is one contiguous range of its buffer on a side: that
    // buffer and range.
    struct Range {
      int32_t buffer = -1;  // -1: not contiguous
      ByteRange range;
    };
    auto range_of = [&](bool is_src, const Segment& sg) {
      const SideLayout& side = is_src && !relay ? ns : nd;
      const Record& r = side.records[is_src ? sg.src_record : sg.dst_record];
      Range out;
      int32_t b;
      ByteRange br;
      if (SegmentRange(r, DTypeSize(side.tensors[r.tensor].dtype), sg.box, &b,
                       &br)) {
        out.buffer = b;
        out.range = br;
      }
      return out;
    };
    // If every segment of plan->segments[j, k) is one contiguous range of one
    // buffer, continuing the previous one: that buffer and the whole range.
    auto contiguous = [&](bool is_src, size_t j, size_t k) {
      Range all;
      for (size_t q = j; q < k; ++q) {
        const Range r = range_of(is_src, plan->segments[q]);
        if (r.buffer < 0) return Range{};
        if (q == j) {
          all = r;
        } else if (r.buffer != all.buffer || r.range.begin != all.range.end()) {
          return Range{};
        } else {
          all.range.size += r.range.size;
        }
      }
      return all;
    };
    auto segment_of = [&](const SegKey& k) {
      return Segment{src_record_of(k), cands[k.cand].dst_record, seg_box(k),
                     k.bytes};
    };
    // Appends the message of plan->segments[j, end) of the pair (s, d), whose
    // contiguity per side is `src` and `dst`.
    auto add_message = [&](int32_t s, int32_t d, int32_t seq, size_t j,
                           const Range& src, const Range& dst, int32_t message_batch) {
      PendingMessage mm;
      mm.batch = message_batch;
      mm.stage = relay ? 0 : stage_of(s);
      mm.seq = seq;
      mm.m.src_rank = relay ? s - src_world : s;
      mm.m.relay = relay;
      mm.m.dst_rank = d;
      mm.m.first_segment = static_cast<int32_t>(j);
      mm.m.num_segments = static_cast<int32_t>(plan->segments.size() - j);
      int64_t bytes = 0;
      for (size_t q = j; q < plan->segments.size(); ++q) {
        bytes += plan->segments[q].bytes;
      }
      mm.m.bytes = bytes;
      if (src.buffer >= 0) {
        mm.m.src_contiguous = true;
        mm.m.src_buffer = src.buffer;
        mm.m.src_offset = src.range.begin;
      }
      if (dst.buffer >= 0) {
        mm.m.dst_contiguous = true;
        mm.m.dst_buffer = dst.buffer;
        mm.m.dst_offset = dst.range.begin;
      }
      msgs.push_back(mm);
    };
    std::vector<int32_t> pending;  // keys of the message being coalesced
    for (size_t i = 0; i < keys.size();) {
      const int32_t s = keys[i].src_rank, d = dst_rank_of(keys[i]);
      size_t e = i;
      while (e < keys.size() && keys[e].src_rank == s && dst_rank_of(keys[e]) == d) {
        ++e;
      }
      relay = s >= src_world;
      // keys[i, e) is one pair, in destination order. Segments of at least
      // direct_min bytes that are contiguous on a side become messages of
      // their own, in place; the others are coalesced in order into
      // messages of at most `cap`, each placed where it fills up.
      pending.clear();
      int64_t pending_bytes = 0;
      int32_t pending_batch = 0;  // the largest batch among `pending`
      int32_t seq = 0;
      auto batch_of = [&](size_t q) { return batch != nullptr ? (*batch)[q] : 0; };
      auto flush = [&]() {
        if (pending.empty()) return;
        const size_t j = plan->segments.size();
        for (int32_t q : pending) {
          plan->segments.push_back(segment_of(keys[q]));
          if (segment_cand != nullptr) segment_cand->push_back(keys[q].cand);
        }
        add_message(s, d, seq++, j, contiguous(true, j, plan->segments.size()),
                    contiguous(false, j, plan->segments.size()), pending_batch);
        pending.clear();
        pending_bytes = 0;
        pending_batch = 0;
      };
      for (size_t q = i; q < e; ++q) {
        if (q + kPrefetchAhead < keys.size()) {
          PrefetchCandidate(candidates, nd, cands[keys[q + kPrefetchAhead].cand]);
        }
        const SegKey& k = keys[q];
        if (direct_min > 0 && k.bytes >= direct_min) {
          plan->segments.push_back(segment_of(k));
          const Segment& sg = plan->segments.back();
          const Range src = range_of(true, sg), dst = range_of(false, sg);
          if (src.buffer >= 0 || dst.buffer >= 0) {
            if (batch != nullptr && !pending.empty()) {
              // Batches stay in key order (the segment goes after them).
              plan->segments.pop_back();
              flush();
              plan->segments.push_back(segment_of(k));
            }
            add_message(s, d, seq++, plan->segments.size() - 1, src, dst, batch_of(q));
            if (segment_cand != nullptr) segment_cand->push_back(k.cand);
            continue;
          }
          plan->segments.pop_back();
        }
        if (!pending.empty() &&
            (pending_bytes + k.bytes > cap ||
             (split_batches && batch_of(pending.back()) != batch_of(q)))) {
          flush();
        }
        pending.push_back(static_cast<int32_t>(q));
        pending_bytes += k.bytes;
        pending_batch = std::max(pending_batch, batch_of(q));
      }
      flush();
      i = e;
    }
  }
  return msgs;
}

RankBytes HeaviestRankBytes(const SegmentKeys& keys, const Candidates& candidates,
                            const Plan& plan, int64_t direct_min) {
  std::vector<RankBytes> sent(std::max(0, plan.src.world_size));
  std::vector<RankBytes> received(std::max(0, plan.dst.world_size));
  RankBytes most;
  auto add = [&](RankBytes& r, int64_t bytes, bool coalesced) {
    r.all += bytes;
    if (coalesced) r.coalesced += bytes;
    most.all = std::max(most.all, r.all);
    most.coalesced = std::max(most.coalesced, r.coalesced);
  };
  for (const SegKey& k : keys.keys) {
    const bool coalesced = direct_min <= 0 || k.bytes < direct_min;
    const int32_t d = candidates.cands[k.cand].dst_rank;
    if (k.src_rank >= 0 && k.src_rank < static_cast<int32_t>(sent.size())) {
      add(sent[k.src_rank], k.bytes, coalesced);
    }
    if (d >= 0 && d < static_cast<int32_t>(received.size())) add(received[d], k.bytes, coalesced);
  }
  return most;
}

}  // namespace internal_plan
}  // namespace refit
