// Replica choice: greedy, deterministic balance of bytes among source ranks.
#include "plan/internal/balance.h"

#include <algorithm>
#include <tuple>

namespace refit {
namespace internal_plan {

std::vector<int32_t> BalanceReplicas(const Candidates& candidates,
                                     const SideLayout& src,
                                     const SideLayout& dst,
                                     bool prefer_same_host) {
  const std::vector<Candidate>& cands = candidates.cands;
  std::vector<int32_t> choice(cands.size(), -1);  // index into replicas
  std::vector<int64_t> assigned(src.world_size, 0);
  {
    // (-bytes, dst record, candidate): bytes descending, then destination
    // record order, then the source piece order (candidates of one record
    // are generated in piece order).
    std::vector<std::tuple<int64_t, int32_t, int32_t>> multi;
    for (size_t i = 0; i < cands.size(); ++i) {
      const Piece& p = candidates.PieceOf(cands[i]);
      if (p.ranks.size() == 1) {
        choice[i] = 0;
        assigned[p.ranks[0]] += cands[i].bytes;
      } else {
        multi.emplace_back(-cands[i].bytes, cands[i].dst_record,
                           static_cast<int32_t>(i));
      }
    }
    std::sort(multi.begin(), multi.end());
    const bool hosts = prefer_same_host && !src.host_of_rank.empty() &&
                       !dst.host_of_rank.empty();
    for (const auto& [neg_bytes, unused, ci] : multi) {
      const int32_t dst_rank = cands[ci].dst_rank;
      const std::vector<int32_t>& ranks = candidates.PieceOf(cands[ci]).ranks;
      int32_t best = 0;
      for (int32_t k = 1; k < static_cast<int32_t>(ranks.size()); ++k) {
        const int32_t r = ranks[k], b = ranks[best];
        if (assigned[r] != assigned[b]) {
          if (assigned[r] < assigned[b]) best = k;
          continue;
        }
        if (hosts) {
          const bool rs = src.host_of_rank[r] == dst.host_of_rank[dst_rank];
          const bool bs = src.host_of_rank[b] == dst.host_of_rank[dst_rank];
          if (rs != bs) {
            if (rs) best = k;
            continue;
          }
        }
        // replicas are sorted by (rank, index): keep the earlier one.
      }
      choice[ci] = best;
      assigned[ranks[best]] -= neg_bytes;
    }
  }
  return choice;
}

}  // namespace internal_plan
}  // namespace refit
