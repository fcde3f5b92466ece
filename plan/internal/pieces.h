// Source pieces: the disjoint boxes of a source tensor, each with the
// source records (replicas) that hold all of it.
#ifndef REFIT_PLAN_INTERNAL_PIECES_H_
#define REFIT_PLAN_INTERNAL_PIECES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "layout/box.h"
#include "layout/layout.h"

namespace refit {
namespace internal_plan {

// A disjoint piece of a source tensor and the src records holding it all.
struct Piece {
  Box box;
  std::vector<int32_t> replicas;  // src record indices, by (rank, index)
  std::vector<int32_t> ranks;     // their ranks (parallel to replicas)
};

// The pieces of one source tensor.
struct TensorPieces {
  std::vector<Piece> pieces;  // sorted by box
  int64_t max_extent0 = 0;    // largest dim-0 extent (for the dim-0 index)
};

// Builds the disjoint pieces of one source tensor from its records `recs`
// (indices into src.records). Equal boxes are one piece; overlapping
// (non-identical) boxes are cut into disjoint grid cells, so every element
// is in exactly one piece. Returns OK, or INVALID_ARGUMENT when the overlap
// pattern needs more than 2^20 grid cells.
absl::Status BuildPieces(const SideLayout& src, const std::vector<int32_t>& recs,
                         TensorPieces* out);

// Cuts every piece of *tp further at `cuts` (per dim, ascending and
// distinct: positions a piece is cut at where they fall strictly inside
// it), each cell keeping its piece's replicas; the pieces stay sorted by
// box. Leaves *tp as it is and returns false when that would make more
// than 2^20 pieces. Never fails.
bool CutPieces(const std::vector<std::vector<int64_t>>& cuts, TensorPieces* tp);

// Sets *hits to the pieces of tp intersecting q (indices into tp.pieces,
// ascending). Never fails.
void FindPieces(const TensorPieces& tp, const Box& q, std::vector<int32_t>* hits);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_PIECES_H_
