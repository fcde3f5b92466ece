// Candidates: every (destination record, source piece) intersection, the
// transfers among which replica choice picks a source.
#ifndef REFIT_PLAN_INTERNAL_CANDIDATES_H_
#define REFIT_PLAN_INTERNAL_CANDIDATES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/box.h"
#include "layout/layout.h"
#include "plan/internal/pieces.h"

namespace refit {
namespace internal_plan {

struct Candidate {
  int32_t dst_record;
  int32_t src_tensor;
  int32_t piece;  // in pieces[src_tensor]
  int32_t dst_rank;
  int64_t bytes;
  // The index of the first candidate of its group: the candidates of one
  // source piece and equal destination boxes (replicas of one part, on
  // different records). GroupUnits joins the groups that need the same
  // region of the piece into units; relays forward within a unit.
  int32_t unit;
};

// The candidates of a plan and the source pieces they refer to.
struct Candidates {
  // Per src tensor; built only for tensors a non-empty dst record needs.
  std::vector<TensorPieces> pieces;
  // By dst tensor, then by dst box (replicas of a box together), then
  // piece.
  std::vector<Candidate> cands;

  const Piece& PieceOf(const Candidate& c) const {
    return pieces[c.src_tensor].pieces[c.piece];
  }
};

// Asks the CPU to start loading candidate c's destination record (of
// `dst`) and its source piece's box. Loops that visit candidates in no
// memory order call it a few candidates ahead, so that those loads overlap
// instead of each stalling the loop in turn. Only a hint: never fails.
// Always inlined: GCC deems a call that only prefetches free of effects
// and drops it.
[[gnu::always_inline]] inline void PrefetchCandidate(const Candidates& candidates,
                                                    const SideLayout& dst, const Candidate& c) {
  constexpr size_t kLine = 64;
  const char* record = reinterpret_cast<const char*>(&dst.records[c.dst_record]);
  for (size_t at = 0; at < sizeof(Record); at += kLine) __builtin_prefetch(record + at);
  __builtin_prefetch(&candidates.PieceOf(c).box);
}

// How many candidates ahead loops call PrefetchCandidate.
inline constexpr size_t kPrefetchAhead = 8;

// Finds the candidates of every dst record, computed once per distinct
// (tensor, box) of the destination; `dst_to_src` maps dst tensors to src
// tensors (all matched). Appends a line to *errors for each dst record
// that the source does not fully cover. Returns OK, or BuildPieces' error
// annotated with the tensor name.
// The units of a plan's candidates: the candidates of one source piece
// whose destination records need the same region of it (the piece's
// intersection with their boxes), which are the same bytes: one dst tensor
// has one dtype and one set of values, quantized codes and scales
// included (conversions quantize on the tensor's global tile grid, so a
// region's codes and scales do not depend on the engine rank that holds
// it). Replicas of one engine layout share whole parts; replicas of
// different layouts (a TP8 and a TP4 replica, fused or not) share the
// regions a source piece cuts both to alike. Unit u's candidates are
// members[first[u], first[u + 1]), ascending.
struct Units {
  std::vector<int32_t> first;    // one more entry than units
  std::vector<int32_t> members;  // candidate indices
  int32_t size() const { return static_cast<int32_t>(first.size()) - 1; }
};

// Returns the units of `candidates` (whose dst records are `dst`'s),
// numbered by their first candidate. Never fails.
Units GroupUnits(const Candidates& candidates, const SideLayout& dst);

// Per unit, the other units of the same source piece whose region
// contains its own (a TP2 engine rank's half of a column-parallel weight
// contains a TP4 rank's quarter of it, under a TP2 trainer): an engine
// rank holding such a region may forward the sub-region (relays.h).
// Containers of unit u are units[first[u], first[u + 1]), by bytes
// descending, then unit number.
struct Containers {
  std::vector<int32_t> first;  // one more entry than units
  std::vector<int32_t> units;
  // Whether unit u has a container.
  bool Contained(int32_t u) const { return first[u + 1] > first[u]; }
};

// Pieces with more units than this are not searched for containers (each
// pair of a piece's units is compared).
inline constexpr int32_t kMaxContainerSearch = 64;

// Returns the containers of every unit of `units` (of `candidates`, whose
// dst records are `dst`). Never fails.
Containers ContainingUnits(const Candidates& candidates, const Units& units,
                           const SideLayout& dst);

// With `cut_at_dst`, each source piece is first cut at every boundary of
// the dst records of its tensor (CutPieces; a tensor whose cut would make
// too many pieces stays as it is), so that the regions of any two
// candidates of one piece are equal or disjoint: where one engine layout
// needs halves and another quarters, a half is two candidates, each the
// region a quarter's holder has too (relays.h: every holder of a region
// may carry it into its host).
absl::Status FindCandidates(const SideLayout& src, const SideLayout& dst,
                            const std::vector<int32_t>& dst_to_src,
                            Candidates* out, std::vector<std::string>* errors,
                            bool cut_at_dst = false);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_CANDIDATES_H_
