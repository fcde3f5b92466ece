// Candidates: (destination record, source piece) intersections.
#include "plan/internal/candidates.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"
#include "plan/internal/errors.h"

namespace refit {
namespace internal_plan {

namespace {

// A group of equal dst boxes of one tensor (the records order[begin, end)
// of FindCandidates' order) and the source pieces its box hits: hits and
// their bytes in the box at [hits_begin, hits_end) of the GroupHits.
struct Group {
  int32_t begin, end;
  int32_t src_tensor;
  int32_t hits_begin, hits_end;
};

struct GroupHits {
  std::vector<Group> groups;
  std::vector<int32_t> hits;
  std::vector<int64_t> bytes;
  size_t num_cands = 0;  // the candidates they make: records x hits
};

// Sorts the dst records [b, e) (indices into dst.records) so that equal
// boxes are together: by a hash of the box, then index (a collision only
// splits a group; the groups stay exact).
void SortByBox(const SideLayout& dst, std::vector<int32_t>::iterator b,
               std::vector<int32_t>::iterator e,
               std::vector<std::pair<uint64_t, int32_t>>* box_hash) {
  box_hash->clear();
  for (auto q = b; q != e; ++q) {
    const Box& bx = dst.records[*q].box;
    uint64_t h = static_cast<uint64_t>(bx.rank());
    for (int d = 0; d < bx.rank(); ++d) {
      h = (h ^ static_cast<uint64_t>(bx.origin(d))) * 0x9E3779B97F4A7C15ULL;
      h = (h ^ static_cast<uint64_t>(bx.shape(d))) * 0xC2B2AE3D27D4EB4FULL;
    }
    box_hash->emplace_back(h, *q);
  }
  std::sort(box_hash->begin(), box_hash->end());
  for (size_t q = 0; q < box_hash->size(); ++q) b[q] = (*box_hash)[q].second;
}

// Appends the candidates of `g` to *cands, which has room for them (a
// vector reserved once: growing it by doubling would touch twice its
// memory, fresh): per record of the group, one per hit, in that order;
// their unit is the group's first candidate for that hit.
void EmitCandidates(const GroupHits& g, const std::vector<int32_t>& order,
                    const SideLayout& dst, std::vector<Candidate>* cands) {
  cands->reserve(cands->size() + g.num_cands);
  for (const Group& grp : g.groups) {
    const int32_t unit_base = static_cast<int32_t>(cands->size());
    for (int32_t q = grp.begin; q < grp.end; ++q) {
      const int32_t k = order[q];
      for (int32_t h = grp.hits_begin; h < grp.hits_end; ++h) {
        cands->push_back(Candidate{k, grp.src_tensor, g.hits[h], dst.records[k].rank, g.bytes[h],
                                   unit_base + (h - grp.hits_begin)});
      }
    }
  }
}

// Per src tensor and dim, the origins and limits of the boxes of the dst
// records of the dst tensors mapped to it (`dst_to_src`), ascending and
// distinct.
std::vector<std::vector<std::vector<int64_t>>> DstBoundaries(
    const SideLayout& src, const SideLayout& dst, const std::vector<int32_t>& dst_to_src) {
  std::vector<std::vector<std::vector<int64_t>>> cuts(src.tensors.size());
  for (const Record& r : dst.records) {
    if (IsEmpty(r.box)) continue;
    std::vector<std::vector<int64_t>>& c = cuts[dst_to_src[r.tensor]];
    if (c.size() < static_cast<size_t>(r.box.rank())) c.resize(r.box.rank());
    for (int d = 0; d < r.box.rank(); ++d) {
      c[d].push_back(r.box.origin(d));
      c[d].push_back(r.box.limit(d));
    }
  }
  for (auto& per_tensor : cuts) {
    for (std::vector<int64_t>& c : per_tensor) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
    }
  }
  return cuts;
}

}  // namespace

absl::Status FindCandidates(const SideLayout& src, const SideLayout& dst,
                            const std::vector<int32_t>& dst_to_src,
                            Candidates* out, std::vector<std::string>* errors,
                            bool cut_at_dst) {
  std::vector<std::vector<int32_t>> src_recs(src.tensors.size());
  for (size_t i = 0; i < src.records.size(); ++i) {
    src_recs[src.records[i].tensor].push_back(static_cast<int32_t>(i));
  }
  // Per src tensor and dim, the boundaries of the dst records needing it.
  std::vector<std::vector<std::vector<int64_t>>> cuts;
  if (cut_at_dst) cuts = DstBoundaries(src, dst, dst_to_src);
  std::vector<TensorPieces> pieces(src.tensors.size());
  std::vector<char> built(src.tensors.size(), 0);
  std::vector<Candidate>& cands = out->cands;
  {
    // dst records by tensor (counting sort), then by box within a tensor.
    const size_t nt = dst.tensors.size();
    std::vector<int32_t> first(nt + 1, 0);
    for (const Record& r : dst.records) ++first[r.tensor + 1];
    for (size_t t = 0; t < nt; ++t) first[t + 1] += first[t];
    std::vector<int32_t> order(dst.records.size());
    {
      std::vector<int32_t> cursor(first.begin(), first.end() - 1);
      for (size_t i = 0; i < dst.records.size(); ++i) {
        order[cursor[dst.records[i].tensor]++] = static_cast<int32_t>(i);
      }
    }
    // Per group of equal dst boxes, the pieces it hits; then the
    // candidates, written at once.
    GroupHits g;
    std::vector<int32_t> hits;
    std::vector<std::pair<uint64_t, int32_t>> box_hash;
    for (size_t t = 0; t < nt; ++t) {
      auto b = order.begin() + first[t], e = order.begin() + first[t + 1];
      SortByBox(dst, b, e, &box_hash);
      const int32_t st = dst_to_src[t];
      const int64_t es = DTypeSize(dst.tensors[t].dtype);
      for (auto i = b; i != e;) {
        const Record& r0 = dst.records[*i];
        auto j = i;
        while (j != e && dst.records[*j].box == r0.box) ++j;
        if (IsEmpty(r0.box)) {
          i = j;
          continue;
        }
        if (!built[st]) {
          absl::Status s = BuildPieces(src, src_recs[st], &pieces[st]);
          if (!s.ok()) return AnnotateStatus(s, "tensor " + src.tensors[st].name);
          if (cut_at_dst) CutPieces(cuts[st], &pieces[st]);
          built[st] = 1;
        }
        FindPieces(pieces[st], r0.box, &hits);
        int64_t covered = 0;
        const int32_t hits_begin = static_cast<int32_t>(g.hits.size());
        for (int32_t h : hits) {
          const int64_t n = UncheckedNumElements(Intersect(pieces[st].pieces[h].box, r0.box));
          covered += n;
          g.hits.push_back(h);
          g.bytes.push_back(n * es);
        }
        const int64_t total = UncheckedNumElements(r0.box);
        if (covered != total) {
          for (auto k = i; k != j; ++k) {
            errors->push_back(absl::StrCat(
                "no source for ", total - covered, " of ", total,
                " elements of ", DescribePart(dst.tensors[t], r0.box), " on ",
                DstRank(dst.records[*k].rank)));
          }
        } else {
          g.groups.push_back({static_cast<int32_t>(i - order.begin()),
                              static_cast<int32_t>(j - order.begin()), st, hits_begin,
                              static_cast<int32_t>(g.hits.size())});
          g.num_cands += static_cast<size_t>(j - i) * hits.size();
        }
        i = j;
      }
    }
    EmitCandidates(g, order, dst, &cands);
  }
  out->pieces = std::move(pieces);
  return absl::OkStatus();
}

namespace {

// A hash of a candidate's source piece and region, the intersection of
// boxes `a` and `b` (a collision only keeps two units apart; the units
// stay exact). Equals the hash of Intersect(a, b) without building it.
uint64_t RegionHash(const Candidate& c, const Box& a, const Box& b) {
  uint64_t h = (static_cast<uint64_t>(c.src_tensor) << 32) ^ static_cast<uint32_t>(c.piece);
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.origin(d), b.origin(d));
    const int64_t hi = std::min(a.origin(d) + a.shape(d), b.origin(d) + b.shape(d));
    h = (h ^ static_cast<uint64_t>(lo)) * 0x9E3779B97F4A7C15ULL;
    h = (h ^ static_cast<uint64_t>(hi > lo ? hi - lo : 0)) * 0xC2B2AE3D27D4EB4FULL;
  }
  return h;
}

// rep[g]: for each group's first candidate g (Candidate::unit == g), the
// first candidate of the earliest group needing the same region of the
// same piece; -1 elsewhere. The groups go in candidate order into an
// open-addressing table keyed by RegionHash; a group whose hash is there
// already compares regions with the groups of that hash (a collision
// only costs a comparison).
std::vector<int32_t> JoinGroups(const Candidates& candidates, const SideLayout& dst) {
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<int32_t> rep(cands.size(), -1);
  auto region_of = [&](const Candidate& c) {
    return Intersect(candidates.PieceOf(c).box, dst.records[c.dst_record].box);
  };
  size_t num_groups = 0;
  for (size_t i = 0; i < cands.size(); ++i) num_groups += cands[i].unit == static_cast<int32_t>(i);
  size_t slots = 16;
  while (slots < 2 * num_groups) slots *= 2;
  // Per slot the hash and the first group (-1: empty) of a distinct
  // region; groups of equal hash and different regions take later slots.
  std::vector<uint64_t> slot_hash(slots, 0);
  std::vector<int32_t> slot_group(slots, -1);
  for (size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    const int32_t g = static_cast<int32_t>(i);
    if (c.unit != g) continue;
    const uint64_t h = RegionHash(c, candidates.PieceOf(c).box, dst.records[c.dst_record].box);
    rep[g] = g;
    std::optional<Box> region;  // built at the first equal hash
    for (size_t at = (h ^ (h >> 29)) & (slots - 1);; at = (at + 1) & (slots - 1)) {
      const int32_t f = slot_group[at];
      if (f < 0) {
        slot_hash[at] = h;
        slot_group[at] = g;
        break;
      }
      if (slot_hash[at] != h) continue;
      const Candidate& cf = cands[f];
      if (cf.src_tensor != c.src_tensor || cf.piece != c.piece) continue;
      if (!region) region = region_of(c);
      if (region_of(cf) == *region) {
        rep[g] = f;
        break;
      }
    }
  }
  return rep;
}

}  // namespace

Units GroupUnits(const Candidates& candidates, const SideLayout& dst) {
  const std::vector<Candidate>& cands = candidates.cands;
  const std::vector<int32_t> rep = JoinGroups(candidates, dst);
  // id[i]: the unit number of candidate i (a unit's first candidate comes
  // before its others: a group's representative is its smallest first).
  std::vector<int32_t> id(cands.size());
  Units u;
  u.first.push_back(0);
  for (size_t i = 0; i < cands.size(); ++i) {
    const int32_t f = rep[cands[i].unit];
    if (f == static_cast<int32_t>(i)) {
      id[i] = u.size();
      u.first.push_back(0);
    } else {
      id[i] = id[f];
    }
    ++u.first[id[i] + 1];
  }
  for (int32_t k = 0; k < u.size(); ++k) u.first[k + 1] += u.first[k];
  u.members.resize(cands.size());
  std::vector<int32_t> cursor(u.first.begin(), u.first.end() - 1);
  for (size_t i = 0; i < cands.size(); ++i) u.members[cursor[id[i]]++] = static_cast<int32_t>(i);
  return u;
}

Containers ContainingUnits(const Candidates& candidates, const Units& units,
                           const SideLayout& dst) {
  const std::vector<Candidate>& cands = candidates.cands;
  const int32_t n = units.size();
  // Units by source piece (a counting sort over the pieces of all
  // tensors), in unit order within one.
  std::vector<int32_t> piece_base(candidates.pieces.size() + 1, 0);
  for (size_t t = 0; t < candidates.pieces.size(); ++t) {
    piece_base[t + 1] = piece_base[t] + static_cast<int32_t>(candidates.pieces[t].pieces.size());
  }
  auto key = [&](int32_t u) {
    const Candidate& c = cands[units.members[units.first[u]]];
    return piece_base[c.src_tensor] + c.piece;
  };
  std::vector<int32_t> first(piece_base.back() + 1, 0);
  for (int32_t u = 0; u < n; ++u) ++first[key(u) + 1];
  for (size_t k = 1; k < first.size(); ++k) first[k] += first[k - 1];
  std::vector<int32_t> by_piece(n);
  {
    std::vector<int32_t> cursor(first.begin(), first.end() - 1);
    for (int32_t u = 0; u < n; ++u) by_piece[cursor[key(u)]++] = u;
  }
  std::vector<std::pair<int32_t, int32_t>> pairs;  // (unit, container)
  std::vector<std::tuple<int64_t, int32_t, Box>> of_piece;  // (-bytes, unit, region)
  for (size_t k = 0; k + 1 < first.size(); ++k) {
    const int32_t b = first[k], e = first[k + 1];
    if (e - b < 2 || e - b > kMaxContainerSearch) continue;
    // A container has more bytes: none where all have as many.
    auto bytes_of = [&](int32_t i) { return cands[units.members[units.first[by_piece[i]]]].bytes; };
    bool alike = true;
    for (int32_t i = b + 1; i < e && alike; ++i) alike = bytes_of(i) == bytes_of(b);
    if (alike) continue;
    of_piece.clear();
    for (int32_t i = b; i < e; ++i) {
      const Candidate& c = cands[units.members[units.first[by_piece[i]]]];
      of_piece.emplace_back(-c.bytes, by_piece[i],
                            Intersect(candidates.PieceOf(c).box, dst.records[c.dst_record].box));
    }
    // Bytes descending: a container is bigger (equal regions are one
    // unit), so only earlier units may contain a later one.
    std::sort(of_piece.begin(), of_piece.end(), [](const auto& x, const auto& y) {
      return std::tie(std::get<0>(x), std::get<1>(x)) < std::tie(std::get<0>(y), std::get<1>(y));
    });
    for (size_t i = 1; i < of_piece.size(); ++i) {
      for (size_t o = 0; o < i; ++o) {
        if (std::get<0>(of_piece[o]) < std::get<0>(of_piece[i]) &&
            Contains(std::get<2>(of_piece[o]), std::get<2>(of_piece[i]))) {
          pairs.emplace_back(std::get<1>(of_piece[i]), std::get<1>(of_piece[o]));
        }
      }
    }
  }
  // By unit (stable: a unit's containers by bytes descending).
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  Containers out;
  out.first.assign(n + 1, 0);
  out.units.reserve(pairs.size());
  for (const auto& [u, c] : pairs) {
    ++out.first[u + 1];
    out.units.push_back(c);
  }
  for (int32_t u = 0; u < n; ++u) out.first[u + 1] += out.first[u];
  return out;
}

}  // namespace internal_plan
}  // namespace refit
