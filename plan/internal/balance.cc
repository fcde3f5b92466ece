// Replica choice: greedy, deterministic minimization of the predicted refit
// time (plan/cost.h), and the lower bound it is measured against.
#include "plan/internal/balance.h"

#include <algorithm>
#include <tuple>

#include "plan/internal/bound.h"

namespace refit {
namespace internal_plan {

std::vector<int32_t> BalanceReplicas(const Candidates& candidates,
                                     const SideLayout& src,
                                     const SideLayout& dst,
                                     const PlannerOptions& options,
                                     PlanStats* stats) {
  const CostModel cost(src, dst, options);
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<int32_t> choice(cands.size(), -1);  // index into replicas
  std::vector<LinkBytes> src_load(src.world_size), dst_load(dst.world_size);
  // (-bytes, dst record, candidate): bytes descending, then destination
  // record order, then the source piece order (candidates of one record
  // are generated in piece order).
  std::vector<std::tuple<int64_t, int32_t, int32_t>> multi;
  for (size_t i = 0; i < cands.size(); ++i) {
    const Piece& p = candidates.PieceOf(cands[i]);
    if (p.ranks.size() == 1) {
      choice[i] = 0;
      const LinkClass k = cost.ClassOf(p.ranks[0], cands[i].dst_rank);
      src_load[p.ranks[0]].Add(k, cands[i].bytes);
      dst_load[cands[i].dst_rank].Add(k, cands[i].bytes);
    } else {
      multi.emplace_back(-cands[i].bytes, cands[i].dst_record,
                         static_cast<int32_t>(i));
    }
  }
  std::sort(multi.begin(), multi.end());
  // A choice that keeps both its ranks under `floor` (the lower bound, or
  // the slowest rank so far when above it) costs the refit nothing: among
  // those the faster link wins, keeping slow links free for bytes that
  // need them.
  const double bound = SenderLowerBound(candidates, src, dst, cost);
  double floor = bound;
  for (const LinkBytes& l : src_load) floor = std::max(floor, cost.Seconds(l));
  for (const LinkBytes& l : dst_load) floor = std::max(floor, cost.Seconds(l));
  for (const auto& [neg_bytes, unused, ci] : multi) {
    const int64_t bytes = -neg_bytes;
    const int32_t d = cands[ci].dst_rank;
    const std::vector<int32_t>& ranks = candidates.PieceOf(cands[ci]).ranks;
    // A replica on the dst rank's own GPU is taken whenever there is one:
    // its copy reads the memory the dst rank writes anyway, where a copy
    // from another GPU adds that GPU's reads and the link, and the model
    // counts the two ranks of one GPU as two resources.
    bool same_gpu = false;
    for (int32_t r : ranks) same_gpu = same_gpu || cost.ClassOf(r, d) == LinkClass::kSameGpu;
    int32_t best = -1;
    double best_cost = 0, best_src = 0, best_peak = 0;
    LinkClass best_class = LinkClass::kInterHost;
    for (int32_t k = 0; k < static_cast<int32_t>(ranks.size()); ++k) {
      const int32_t r = ranks[k];
      const LinkClass lc = cost.ClassOf(r, d);
      if (same_gpu && lc != LinkClass::kSameGpu) continue;
      const double t_src = cost.SecondsWith(src_load[r], lc, bytes);
      const double peak = std::max(t_src, cost.SecondsWith(dst_load[d], lc, bytes));
      const double t = std::max(peak, floor);
      const double spb = cost.SecondsPerByte(lc), best_spb = cost.SecondsPerByte(best_class);
      // Replicas are sorted by (rank, index): on a full tie keep the
      // earlier one.
      if (best < 0 || t < best_cost ||
          (t == best_cost &&
           (spb < best_spb ||
            (spb == best_spb && (lc < best_class || (lc == best_class && t_src < best_src)))))) {
        best = k;
        best_cost = t;
        best_src = t_src;
        best_class = lc;
        best_peak = peak;
      }
    }
    choice[ci] = best;
    src_load[ranks[best]].Add(best_class, bytes);
    dst_load[d].Add(best_class, bytes);
    floor = std::max(floor, best_peak);
  }
  double predicted = 0;
  for (const LinkBytes& l : src_load) {
    predicted = std::max(predicted, cost.Seconds(l));
    stats->same_gpu_bytes += l.bytes[static_cast<int>(LinkClass::kSameGpu)];
    stats->intra_host_bytes += l.bytes[static_cast<int>(LinkClass::kSameHost)];
    stats->inter_host_bytes += l.bytes[static_cast<int>(LinkClass::kInterHost)];
  }
  for (const LinkBytes& l : dst_load) predicted = std::max(predicted, cost.Seconds(l));
  stats->predicted_seconds = predicted;
  stats->lower_bound_seconds = bound;
  stats->sender_lower_bound_seconds = bound;
  return choice;
}

}  // namespace internal_plan
}  // namespace refit
