// RelayRoots (see relay_roots.h).
#include "plan/relay_roots.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace refit {
std::string SegmentPlaceKey(int32_t engine_rank, int32_t record, const Box& box) {
  std::string key;
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(engine_rank);
  put(record);
  for (int64_t o : box.origin()) put(o);
  for (int64_t n : box.shape()) put(n);
  return key;
}

std::vector<std::vector<int32_t>> RelayRoots(const Plan& plan) {
  std::vector<std::vector<int32_t>> roots(plan.messages.size());
  bool relays = false;
  for (const Message& m : plan.messages) relays = relays || m.relay;
  if (!relays) return roots;
  // Where each message's segments land -> the message.
  std::map<std::string, int32_t> arrivals;
  auto segment = [&plan](const Message& m, int32_t j) -> const Segment* {
    const int64_t s = int64_t{m.first_segment} + j;
    return s >= 0 && s < static_cast<int64_t>(plan.segments.size()) ? &plan.segments[s] : nullptr;
  };
  for (int32_t mi = 0; mi < static_cast<int32_t>(plan.messages.size()); ++mi) {
    const Message& m = plan.messages[mi];
    for (int32_t j = 0; j < m.num_segments; ++j) {
      if (const Segment* seg = segment(m, j)) {
        arrivals.emplace(SegmentPlaceKey(m.dst_rank, seg->dst_record, seg->box), mi);
      }
    }
  }
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
      const Segment* seg = segment(m, j);
      if (seg == nullptr) continue;
      auto it = arrivals.find(SegmentPlaceKey(m.src_rank, seg->src_record, seg->box));
      if (it == arrivals.end() || it->second == mi) continue;
      const Message& from = plan.messages[it->second];
      if (from.relay) {
        r.insert(r.end(), roots[it->second].begin(), roots[it->second].end());
      } else {
        r.push_back(from.src_rank);
      }
    }
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  return roots;
}

}  // namespace refit
