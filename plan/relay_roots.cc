// RelayRoots (see relay_roots.h).
#include "plan/relay_roots.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace refit {
namespace {

const Segment* SegmentOf(const Plan& plan, const Message& m, int32_t j) {
  const int64_t s = int64_t{m.first_segment} + j;
  return s >= 0 && s < static_cast<int64_t>(plan.segments.size()) ? &plan.segments[s] : nullptr;
}

}  // namespace

std::string SegmentPlaceKey(int32_t engine_rank, int32_t record, const Box& box) {
  std::string key;
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(engine_rank);
  put(record);
  for (int64_t o : box.origin()) put(o);
  for (int64_t n : box.shape()) put(n);
  return key;
}

RelayArrivals::RelayArrivals(const Plan& plan) : plan_(plan) {
  for (int32_t mi = 0; mi < static_cast<int32_t>(plan.messages.size()); ++mi) {
    const Message& m = plan.messages[mi];
    for (int32_t j = 0; j < m.num_segments; ++j) {
      const Segment* seg = SegmentOf(plan, m, j);
      if (seg == nullptr) continue;
      exact_.emplace(SegmentPlaceKey(m.dst_rank, seg->dst_record, seg->box), std::make_pair(mi, j));
      by_record_.emplace_back(m.dst_rank, seg->dst_record, mi, j);
    }
  }
  std::sort(by_record_.begin(), by_record_.end());
}

std::vector<RelayArrivals::Part> RelayArrivals::PartsOf(int32_t rank, int32_t record,
                                                        const Box& box, bool* covered) const {
  std::vector<Part> parts;
  auto it = exact_.find(SegmentPlaceKey(rank, record, box));
  if (it != exact_.end()) {
    parts.push_back({it->second.first, it->second.second, box});
    if (covered != nullptr) *covered = true;
    return parts;
  }
  int64_t elements = 0;
  for (auto at = std::lower_bound(by_record_.begin(), by_record_.end(),
                                  std::make_tuple(rank, record, int32_t{-1}, int32_t{-1}));
       at != by_record_.end() && std::get<0>(*at) == rank && std::get<1>(*at) == record; ++at) {
    const int32_t mi = std::get<2>(*at), j = std::get<3>(*at);
    const Segment& seg = *SegmentOf(plan_, plan_.messages[mi], j);
    if (seg.box.rank() != box.rank() || !Intersects(seg.box, box)) continue;
    parts.push_back({mi, j, Intersect(seg.box, box)});
    elements += UncheckedNumElements(parts.back().box);
  }
  if (covered != nullptr) *covered = elements == UncheckedNumElements(box);
  return parts;
}

std::vector<std::vector<int32_t>> RelayRoots(const Plan& plan) {
  std::vector<std::vector<int32_t>> roots(plan.messages.size());
  bool relays = false;
  for (const Message& m : plan.messages) relays = relays || m.relay;
  if (!relays) return roots;
  const RelayArrivals arrivals(plan);
  // Messages in wave order: a relay's sources come in earlier waves, so
  // their roots are known when it is reached.
  std::vector<int32_t> order(plan.messages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&plan](int32_t a, int32_t b) {
    return plan.messages[a].wave < plan.messages[b].wave;
  });
  for (int32_t mi : order) {
    const Message& m = plan.messages[mi];
    if (!m.relay) continue;
    std::vector<int32_t>& r = roots[mi];
    for (int32_t j = 0; j < m.num_segments; ++j) {
      const Segment* seg = SegmentOf(plan, m, j);
      if (seg == nullptr) continue;
      for (const RelayArrivals::Part& p : arrivals.PartsOf(m.src_rank, seg->src_record, seg->box)) {
        if (p.message == mi) continue;
        const Message& from = plan.messages[p.message];
        if (from.relay) {
          r.insert(r.end(), roots[p.message].begin(), roots[p.message].end());
        } else {
          r.push_back(from.src_rank);
        }
      }
    }
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  return roots;
}

}  // namespace refit
