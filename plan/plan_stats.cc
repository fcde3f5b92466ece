// ComputePlanStats: bytes and peak staging per rank from a plan's messages
// and waves.
#include "plan/plan_stats.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace refit {

PlanStats ComputePlanStats(const Plan& plan) {
  PlanStats st;
  st.num_segments = static_cast<int64_t>(plan.segments.size());
  st.num_messages = static_cast<int64_t>(plan.messages.size());
  st.num_waves = static_cast<int64_t>(plan.waves.size());
  const int32_t S = std::max(0, plan.src.world_size);
  const int32_t D = std::max(0, plan.dst.world_size);
  const int L = std::max(1, plan.options.num_lanes);
  st.bytes_sent.assign(S, 0);
  st.bytes_received.assign(D, 0);
  st.bytes_forwarded.assign(D, 0);
  st.staging_src.assign(S, 0);
  st.staging_dst.assign(D, 0);
  std::vector<int64_t> ps(int64_t{S} * L, 0), pd(int64_t{D} * L, 0);
  std::vector<int64_t> rs(S, 0), rd(D, 0);
  for (const Wave& r : plan.waves) {
    const int lane = std::min(std::max(r.lane, 0), L - 1);
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      st.total_bytes += m.bytes;
      // A relay's sender is an engine rank: it packs from its own buffers.
      (m.relay ? st.bytes_forwarded : st.bytes_sent)[m.src_rank] += m.bytes;
      st.bytes_received[m.dst_rank] += m.bytes;
      if (!m.src_contiguous) (m.relay ? rd : rs)[m.src_rank] += m.bytes;
      if (!m.dst_contiguous) rd[m.dst_rank] += m.bytes;
    }
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      int64_t& a = m.relay ? pd[int64_t{m.src_rank} * L + lane] : ps[int64_t{m.src_rank} * L + lane];
      a = std::max(a, (m.relay ? rd : rs)[m.src_rank]);
      int64_t& b = pd[int64_t{m.dst_rank} * L + lane];
      b = std::max(b, rd[m.dst_rank]);
    }
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      (m.relay ? rd : rs)[m.src_rank] = 0;
      rd[m.dst_rank] = 0;
    }
  }
  for (int32_t k = 0; k < S; ++k) {
    for (int l = 0; l < L; ++l) st.staging_src[k] += ps[int64_t{k} * L + l];
  }
  for (int32_t k = 0; k < D; ++k) {
    for (int l = 0; l < L; ++l) st.staging_dst[k] += pd[int64_t{k} * L + l];
  }
  return st;
}

}  // namespace refit
