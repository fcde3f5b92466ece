// SliceBoundsOf (see slice_bounds.h).
#include "server/slice_bounds.h"

#include <algorithm>

#include "plan/relay_roots.h"

namespace refit {

std::vector<SliceBounds> SliceBoundsOf(const Plan& plan, Side side,
                                       const std::vector<int32_t>& ranks) {
  const bool trainer = side == Side::kTrainer;
  const int32_t world = trainer ? plan.src.world_size : plan.dst.world_size;
  std::vector<SliceBounds> by_rank(static_cast<size_t>(std::max(world, 0)));
  // An engine rank that relays also sends: it reports the larger of the
  // bytes it received and those it forwarded (RoundFigures).
  std::vector<int64_t> forwarded(by_rank.size(), 0);
  // A trainer rank digests the relayed copies of its bytes too.
  const std::vector<std::vector<int32_t>> roots =
      trainer ? RelayRoots(plan) : std::vector<std::vector<int32_t>>();
  for (size_t mi = 0; mi < roots.size(); ++mi) {
    const Message& m = plan.messages[mi];
    for (int32_t root : roots[mi]) {
      if (root < 0 || root >= world) continue;
      for (int32_t s = m.first_segment; s < m.first_segment + m.num_segments; ++s) {
        by_rank[root].digest_keys.emplace_back(
            m.dst_rank, plan.dst.records[plan.segments[s].dst_record].tensor);
      }
    }
  }
  for (const Message& m : plan.messages) {
    if (!trainer && m.relay && m.src_rank >= 0 && m.src_rank < world) {
      forwarded[m.src_rank] += m.bytes;
      ++by_rank[m.src_rank].messages;
    }
    // A relay's sender is an engine rank, never a trainer rank.
    const int32_t r = trainer ? (m.relay ? -1 : m.src_rank) : m.dst_rank;
    if (r < 0 || r >= world) continue;
    SliceBounds& b = by_rank[r];
    b.bytes += m.bytes;
    ++b.messages;
    for (int32_t s = m.first_segment; s < m.first_segment + m.num_segments; ++s) {
      const int32_t record = plan.segments[s].dst_record;
      b.digest_keys.emplace_back(m.dst_rank, plan.dst.records[record].tensor);
    }
  }
  for (size_t r = 0; r < by_rank.size(); ++r) {
    by_rank[r].bytes = std::max(by_rank[r].bytes, forwarded[r]);
  }
  std::vector<SliceBounds> out;
  out.reserve(ranks.size());
  for (int32_t r : ranks) {
    SliceBounds b;
    if (r >= 0 && r < world) {
      b = std::move(by_rank[r]);
      std::sort(b.digest_keys.begin(), b.digest_keys.end());
      b.digest_keys.erase(std::unique(b.digest_keys.begin(), b.digest_keys.end()),
                          b.digest_keys.end());
    }
    b.engine_rank = trainer ? -1 : r;
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace refit
