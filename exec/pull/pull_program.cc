// PullProgram (see pull_program.h).
#include "exec/pull/pull_program.h"

#include <map>
#include <set>
#include <utility>

#include "common/status_macros.h"

namespace refit {

std::vector<int32_t> PairSourceBuffers(const Plan& plan, int32_t src_rank,
                                       int32_t dst_rank) {
  std::vector<int32_t> out;
  std::set<int32_t> seen;
  for (const Message& m : plan.messages) {
    if (m.relay || m.src_rank != src_rank || m.dst_rank != dst_rank) continue;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      if (i < 0 || i >= static_cast<int32_t>(plan.segments.size())) break;
      const int32_t ri = plan.segments[i].src_record;
      if (ri < 0 || ri >= static_cast<int32_t>(plan.src.records.size())) continue;
      const Record& r = plan.src.records[ri];
      const int64_t n =
          r.buffer_step > 0 && r.box.rank() > 0 ? r.box.shape(0) : 1;
      for (int64_t k = 0; k < n; ++k) {
        const int32_t b = RecordBuffer(r, k);
        if (seen.insert(b).second) out.push_back(b);
      }
    }
  }
  return out;
}

std::vector<int32_t> PullReceivers(const Plan& plan, int32_t src_rank,
                                   const std::function<bool(int32_t)>& include) {
  std::set<int32_t> dst;
  for (const Message& m : plan.messages) {
    if (!m.relay && m.src_rank == src_rank && (!include || include(m.dst_rank))) {
      dst.insert(m.dst_rank);
    }
  }
  return {dst.begin(), dst.end()};
}

namespace {

// The host index of global rank g, or -1 when unknown.
int32_t HostOf(const Plan& plan, int32_t g) {
  const int32_t ws = plan.src.world_size;
  const SideLayout& side = g < ws ? plan.src : plan.dst;
  const int32_t r = g < ws ? g : g - ws;
  if (r < 0 || r >= static_cast<int32_t>(side.host_of_rank.size())) return -1;
  return side.host_of_rank[r];
}

}  // namespace

bool SameHost(const Plan& plan, int32_t a, int32_t b) {
  const int32_t ha = HostOf(plan, a), hb = HostOf(plan, b);
  return ha < 0 || hb < 0 || ha == hb;
}

absl::StatusOr<PullProgram> BuildPullProgram(
    const Plan& plan, int32_t dst_rank,
    const std::function<bool(int32_t)>& include) {
  PullProgram p;
  std::set<int32_t> senders;
  for (const Message& m : plan.messages) {
    if (m.relay || m.dst_rank != dst_rank || (include && !include(m.src_rank))) continue;
    senders.insert(m.src_rank);
    REFIT_ASSIGN_OR_RETURN(std::vector<CopyTask> t, DirectProgram(plan, m));
    p.tasks.insert(p.tasks.end(), t.begin(), t.end());
  }
  for (int32_t s : senders) {
    p.peers.push_back({s, PairSourceBuffers(plan, s, dst_rank)});
  }
  p.bytes = TaskBytes(p.tasks);
  return p;
}

}  // namespace refit
