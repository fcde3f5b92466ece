// Source pieces: disjoint boxes of a source tensor and their replicas.
#include "plan/internal/pieces.h"

#include <algorithm>
#include <utility>

namespace refit {
namespace internal_plan {
namespace {

constexpr int64_t kMaxGridCells = 1 << 20;

// Per dim of `box`, its origin, the positions of `cuts[d]` (ascending)
// strictly inside it, and its limit: the edges of its cells. Dims that
// `cuts` has none for are not cut.
std::vector<std::vector<int64_t>> CellEdges(const Box& box,
                                            const std::vector<std::vector<int64_t>>& cuts) {
  std::vector<std::vector<int64_t>> edges(box.rank());
  for (int d = 0; d < box.rank(); ++d) {
    std::vector<int64_t>& e = edges[d];
    e.push_back(box.origin(d));
    if (d < static_cast<int>(cuts.size())) {
      e.insert(e.end(), std::upper_bound(cuts[d].begin(), cuts[d].end(), box.origin(d)),
               std::lower_bound(cuts[d].begin(), cuts[d].end(), box.limit(d)));
    }
    e.push_back(box.limit(d));
  }
  return edges;
}

// Appends to *out one piece per cell of `edges` (CellEdges), each with
// p's replicas and ranks.
void AppendCells(const Piece& p, const std::vector<std::vector<int64_t>>& edges,
                 std::vector<Piece>* out) {
  const int rank = static_cast<int>(edges.size());
  std::vector<size_t> idx(rank, 0);
  while (true) {
    Box::Indices o(rank), sz(rank);
    for (int d = 0; d < rank; ++d) {
      o[d] = edges[d][idx[d]];
      sz[d] = edges[d][idx[d] + 1] - o[d];
    }
    out->push_back(Piece{Box::Unchecked(o, sz), p.replicas, p.ranks});
    int d = rank - 1;
    while (d >= 0 && ++idx[d] + 1 == edges[d].size()) {
      idx[d] = 0;
      --d;
    }
    if (d < 0) break;
  }
}

// Returns the largest dim-0 extent of `pieces` (0 for none or rank 0).
int64_t MaxExtent0(const std::vector<Piece>& pieces) {
  int64_t most = 0;
  for (const Piece& p : pieces) {
    if (p.box.rank() > 0) most = std::max(most, p.box.shape(0));
  }
  return most;
}

void SortByBox(std::vector<Piece>* pieces) {
  std::sort(pieces->begin(), pieces->end(),
            [](const Piece& a, const Piece& b) { return a.box < b.box; });
}

}  // namespace

absl::Status BuildPieces(const SideLayout& src, const std::vector<int32_t>& recs,
                         TensorPieces* out) {
  std::vector<int32_t> order(recs);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Record& ra = src.records[a];
    const Record& rb = src.records[b];
    if (ra.box != rb.box) return ra.box < rb.box;
    if (ra.rank != rb.rank) return ra.rank < rb.rank;
    return a < b;
  });
  std::vector<Piece> distinct;
  for (int32_t i : order) {
    const Record& r = src.records[i];
    if (IsEmpty(r.box)) continue;
    if (distinct.empty() || distinct.back().box != r.box) {
      distinct.push_back(Piece{r.box, {}});
    }
    distinct.back().replicas.push_back(i);
  }
  // Overlap check between distinct boxes (sorted by origin, dim-0 sweep).
  bool overlap = false;
  const int rank = distinct.empty() ? 0 : distinct[0].box.rank();
  for (size_t i = 0; i < distinct.size() && !overlap; ++i) {
    for (size_t j = i + 1; j < distinct.size(); ++j) {
      if (rank > 0 && distinct[j].box.origin(0) >= distinct[i].box.limit(0)) {
        break;
      }
      if (Intersects(distinct[i].box, distinct[j].box)) {
        overlap = true;
        break;
      }
    }
  }
  if (overlap) {
    // Cut every dim at every box boundary; each covered grid cell becomes a
    // piece held by every record containing it. Exactly-once by design.
    std::vector<std::vector<int64_t>> cuts(rank);
    for (const Piece& p : distinct) {
      for (int d = 0; d < rank; ++d) {
        cuts[d].push_back(p.box.origin(d));
        cuts[d].push_back(p.box.limit(d));
      }
    }
    int64_t cells = 1;
    for (auto& c : cuts) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      cells *= std::max<int64_t>(1, static_cast<int64_t>(c.size()) - 1);
      if (cells > kMaxGridCells) {
        return absl::InvalidArgumentError(
            "source boxes overlap in too complex a pattern");
      }
    }
    std::vector<Piece> grid;
    for (const Piece& p : distinct) AppendCells(p, CellEdges(p.box, cuts), &grid);
    SortByBox(&grid);
    distinct.clear();
    for (Piece& g : grid) {
      if (!distinct.empty() && distinct.back().box == g.box) {
        auto& r = distinct.back().replicas;
        r.insert(r.end(), g.replicas.begin(), g.replicas.end());
      } else {
        distinct.push_back(std::move(g));
      }
    }
    for (Piece& p : distinct) {
      std::sort(p.replicas.begin(), p.replicas.end(), [&](int32_t a, int32_t b) {
        return std::make_pair(src.records[a].rank, a) <
               std::make_pair(src.records[b].rank, b);
      });
      p.replicas.erase(std::unique(p.replicas.begin(), p.replicas.end()),
                       p.replicas.end());
    }
  }
  for (Piece& p : distinct) {
    p.ranks.clear();
    for (int32_t ri : p.replicas) p.ranks.push_back(src.records[ri].rank);
  }
  out->max_extent0 = MaxExtent0(distinct);
  out->pieces = std::move(distinct);
  return absl::OkStatus();
}

bool CutPieces(const std::vector<std::vector<int64_t>>& cuts, TensorPieces* tp) {
  // Per piece, its cells' edges.
  std::vector<std::vector<std::vector<int64_t>>> edges(tp->pieces.size());
  int64_t total = 0;
  for (size_t i = 0; i < tp->pieces.size(); ++i) {
    edges[i] = CellEdges(tp->pieces[i].box, cuts);
    int64_t cells = 1;
    for (const std::vector<int64_t>& e : edges[i]) {
      cells *= static_cast<int64_t>(e.size()) - 1;
      if (cells > kMaxGridCells) return false;
    }
    total += cells;
    if (total > kMaxGridCells) return false;
  }
  if (total == static_cast<int64_t>(tp->pieces.size())) return true;  // nothing to cut
  std::vector<Piece> cut;
  cut.reserve(total);
  for (size_t i = 0; i < tp->pieces.size(); ++i) AppendCells(tp->pieces[i], edges[i], &cut);
  SortByBox(&cut);
  tp->max_extent0 = MaxExtent0(cut);
  tp->pieces = std::move(cut);
  return true;
}

// Pieces of tp intersecting q (indices into tp.pieces).
void FindPieces(const TensorPieces& tp, const Box& q, std::vector<int32_t>* hits) {
  hits->clear();
  const auto& ps = tp.pieces;
  size_t start = 0;
  if (q.rank() > 0) {
    const int64_t lo = q.origin(0) - tp.max_extent0;
    start = std::partition_point(ps.begin(), ps.end(),
                                 [&](const Piece& p) {
                                   return p.box.origin(0) <= lo;
                                 }) - ps.begin();
  }
  for (size_t i = start; i < ps.size(); ++i) {
    if (q.rank() > 0 && ps[i].box.origin(0) >= q.limit(0)) break;
    if (Intersects(ps[i].box, q)) hits->push_back(static_cast<int32_t>(i));
  }
}

}  // namespace internal_plan
}  // namespace refit
