// Segments: split at the message cap and ordered per pair by destination.
#include "plan/internal/segments.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "layout/dtype.h"

namespace refit {
namespace internal_plan {
namespace {

// Element offset of global index `g` (inside r.box) relative to byte_offset.
int64_t ElementOffset(const Record& r, absl::Span<const int64_t> g) {
  int64_t off = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    off += DimOffset(r.dims[d], g[d] - r.box.origin(d));
  }
  return off;
}

// Element offset, relative to byte_offset, of the origin of the
// intersection of `box` with r.box (the larger origin per dim), without
// building the intersection.
int64_t IntersectionOffset(const Record& r, const Box& box) {
  int64_t off = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    off += DimOffset(r.dims[d], std::max(box.origin(d), r.box.origin(d)) - r.box.origin(d));
  }
  return off;
}

// Splits box into sub-boxes of at most cap bytes along the outermost dim
// with extent > 1 (recursively when one slice is still too big).
void SplitBox(const Box& box, int64_t es, int64_t cap, std::vector<Box>* out) {
  const int64_t bytes = UncheckedNumElements(box) * es;
  if (bytes <= cap) {
    out->push_back(box);
    return;
  }
  int d = 0;
  while (d < box.rank() && box.shape(d) <= 1) ++d;
  if (d == box.rank()) {  // one element bigger than cap: cannot split
    out->push_back(box);
    return;
  }
  const int64_t slice = bytes / box.shape(d);
  Box::Indices o(box.origin().begin(), box.origin().end());
  Box::Indices s(box.shape().begin(), box.shape().end());
  if (slice > cap) {
    for (int64_t i = 0; i < box.shape(d); ++i) {
      o[d] = box.origin(d) + i;
      s[d] = 1;
      SplitBox(Box::Unchecked(o, s), es, cap, out);
    }
    return;
  }
  const int64_t per = std::max<int64_t>(1, cap / slice);
  for (int64_t i = 0; i < box.shape(d); i += per) {
    o[d] = box.origin(d) + i;
    s[d] = std::min(per, box.shape(d) - i);
    out->push_back(Box::Unchecked(o, s));
  }
}

}  // namespace

std::vector<int32_t> TrainerSenders(const Candidates& candidates,
                                    const std::vector<int32_t>& choice) {
  std::vector<int32_t> sender(choice.size(), -1);
  for (size_t i = 0; i < choice.size(); ++i) {
    if (choice[i] >= 0) sender[i] = candidates.PieceOf(candidates.cands[i]).ranks[choice[i]];
  }
  return sender;
}

namespace {

// OrderSegments over n entries: entry m is candidate index_of(m), sent
// by sender_of(m) (none when negative); `scattered` when those are a few
// candidates of all rather than all in order.
template <typename IndexOf, typename SenderOf>
absl::Status OrderSegmentsImpl(const Candidates& candidates, size_t n, IndexOf index_of,
                               SenderOf sender_of, bool scattered, const SideLayout& src,
                               const SideLayout& dst, int64_t cap, SegmentKeys* out) {
  const std::vector<Candidate>& cands = candidates.cands;
  const std::vector<TensorPieces>& pieces = candidates.pieces;
  std::vector<SegKey>& keys = out->keys;
  std::vector<Box>& split_boxes = out->split_boxes;
  auto dst_rank_of = [&](const SegKey& k) { return cands[k.cand].dst_rank; };
  {
    // Source ranks ordered by (stage, rank), then relaying engine ranks:
    // the pair order.
    int32_t senders = src.world_size;
    for (size_t m = 0; m < n; ++m) senders = std::max(senders, sender_of(m) + 1);
    std::vector<int32_t> src_pos(senders);
    for (int32_t i = src.world_size; i < senders; ++i) src_pos[i] = i;
    {
      std::vector<int32_t> by(src.world_size);
      std::iota(by.begin(), by.end(), 0);
      if (!src.stage_of_rank.empty()) {
        std::stable_sort(by.begin(), by.end(), [&](int32_t x, int32_t y) {
          return src.stage_of_rank[x] < src.stage_of_rank[y];
        });
      }
      for (int32_t i = 0; i < src.world_size; ++i) src_pos[by[i]] = i;
    }
    // Pass 1: split what exceeds the cap (rare). Member m's split boxes
    // are split_boxes[split_off[m], split_off[m + 1]); none: it is whole.
    std::vector<int32_t> split_off(n + 1, 0);
    std::vector<Box> split;
    // Element size per src tensor (of the dst tensor of that name, one per
    // src tensor), looked up at its first candidate: the candidates walk
    // dst records in no particular order, and a record lookup per
    // candidate is a cache miss.
    std::vector<int64_t> es_of_src(src.tensors.size(), 0);
    for (size_t m = 0; m < n; ++m) {
      // A few scattered members (relays) are read ahead; all candidates
      // come in memory order.
      if (scattered && m + kPrefetchAhead < n) {
        __builtin_prefetch(&cands[index_of(m + kPrefetchAhead)]);
      }
      split_off[m] = static_cast<int32_t>(split_boxes.size());
      if (sender_of(m) < 0) continue;
      const Candidate& c = cands[index_of(m)];
      int64_t& es = es_of_src[c.src_tensor];
      if (es == 0) {
        const TensorSpec& t = dst.tensors[dst.records[c.dst_record].tensor];
        es = DTypeSize(t.dtype);
        if (es > cap) {
          return absl::InvalidArgumentError(absl::StrCat(
              "staging budget per lane ", cap, " bytes is smaller than one element of ",
              t.name));
        }
      }
      if (c.bytes <= cap) continue;
      split.clear();
      SplitBox(Intersect(pieces[c.src_tensor].pieces[c.piece].box,
                         dst.records[c.dst_record].box),
               es, cap, &split);
      for (Box& b : split) split_boxes.push_back(std::move(b));
    }
    split_off[n] = static_cast<int32_t>(split_boxes.size());
    // Keys of member m: 1 when whole, else its split boxes.
    auto nkeys = [&](size_t m) {
      return sender_of(m) < 0 ? 0 : std::max<int32_t>(1, split_off[m + 1] - split_off[m]);
    };
    const int64_t npairs = int64_t{senders} * dst.world_size;
    auto pair_of = [&](int32_t src_rank, int32_t dst_rank) {
      return int64_t{src_pos[src_rank]} * dst.world_size + dst_rank;
    };
    auto by_dst = [](const SegKey& x, const SegKey& y) {
      if (x.dst_buffer != y.dst_buffer) return x.dst_buffer < y.dst_buffer;
      if (x.dst_start != y.dst_start) return x.dst_start < y.dst_start;
      if (x.cand != y.cand) return x.cand < y.cand;
      return x.split < y.split;
    };
    // Pass 2: each key straight into its pair's slot (a counting sort over
    // pair positions; a comparison sort when there are too many pairs),
    // then each pair's keys by (dst buffer, dst offset, generation).
    const bool counting = npairs <= (int64_t{1} << 24);
    std::vector<int32_t> first;
    size_t total = 0;
    for (size_t m = 0; m < n; ++m) total += nkeys(m);
    keys.resize(total);
    std::vector<int32_t> cursor;
    if (counting) {
      first.assign(npairs + 1, 0);
      for (size_t m = 0; m < n; ++m) {
        if (sender_of(m) >= 0) first[pair_of(sender_of(m), cands[index_of(m)].dst_rank) + 1] += nkeys(m);
      }
      for (int64_t q = 0; q < npairs; ++q) first[q + 1] += first[q];
      cursor.assign(first.begin(), first.end() - 1);
    }
    size_t next = 0;
    for (size_t m = 0; m < n; ++m) {
      if (m + kPrefetchAhead < n) {
        PrefetchCandidate(candidates, dst, cands[index_of(m + kPrefetchAhead)]);
      }
      const int32_t src_rank = sender_of(m);
      if (src_rank < 0) continue;
      const int32_t i = index_of(m);
      const Candidate& c = cands[i];
      const Record& dr = dst.records[c.dst_record];
      const int64_t es = es_of_src[c.src_tensor];
      // Appends the key of the box whose origin is at element offset `off`
      // of dr (dim-0 index rel0 relative to dr.box).
      auto add = [&](int64_t off, int64_t rel0, int32_t split_index, int64_t bytes) {
        SegKey k{dr.byte_offset + es * off, bytes, RecordBuffer(dr, rel0), i, split_index,
                 src_rank};
        keys[counting ? cursor[pair_of(src_rank, c.dst_rank)]++ : next++] = k;
      };
      if (split_off[m + 1] == split_off[m]) {
        const Box& pb = pieces[c.src_tensor].pieces[c.piece].box;
        const int64_t rel0 =
            dr.box.rank() > 0 ? std::max(pb.origin(0), dr.box.origin(0)) - dr.box.origin(0) : 0;
        add(IntersectionOffset(dr, pb), rel0, -1, c.bytes);
        continue;
      }
      for (int32_t q = split_off[m]; q < split_off[m + 1]; ++q) {
        const Box& b = split_boxes[q];
        const int64_t rel0 = b.rank() > 0 ? b.origin(0) - dr.box.origin(0) : 0;
        add(ElementOffset(dr, b.origin()), rel0, q, UncheckedNumElements(b) * es);
      }
    }
    if (counting) {
      for (int64_t q = 0; q < npairs; ++q) {
        if (first[q + 1] - first[q] > 1) {
          std::sort(keys.begin() + first[q], keys.begin() + first[q + 1], by_dst);
        }
      }
    } else {
      std::sort(keys.begin(), keys.end(), [&](const SegKey& x, const SegKey& y) {
        const int64_t px = pair_of(x.src_rank, dst_rank_of(x));
        const int64_t py = pair_of(y.src_rank, dst_rank_of(y));
        if (px != py) return px < py;
        return by_dst(x, y);
      });
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OrderSegments(const Candidates& candidates,
                           const std::vector<int32_t>& sender,
                           const SideLayout& src, const SideLayout& dst,
                           int64_t cap, SegmentKeys* out) {
  return OrderSegmentsImpl(
      candidates, sender.size(), [](size_t m) { return static_cast<int32_t>(m); },
      [&](size_t m) { return sender[m]; }, false, src, dst, cap, out);
}

absl::Status OrderSegmentsOf(const Candidates& candidates,
                             const std::vector<int32_t>& members,
                             const std::vector<int32_t>& sender,
                             const SideLayout& src, const SideLayout& dst,
                             int64_t cap, SegmentKeys* out) {
  return OrderSegmentsImpl(
      candidates, members.size(), [&](size_t m) { return members[m]; },
      [&](size_t m) { return sender[m]; }, true, src, dst, cap, out);
}

}  // namespace internal_plan
}  // namespace refit
