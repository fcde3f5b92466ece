#include "plan/wave_bytes.h"

#include <cstdint>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

// The bytes of the messages `w` holds in `plan`.
int64_t MessageBytes(const Plan& plan, const Wave& w) {
  int64_t n = 0;
  for (int32_t i = w.first_message; i < w.first_message + w.num_messages; ++i) {
    n += plan.messages[i].bytes;
  }
  return n;
}

}  // namespace

void SetWaveBytes(Plan* plan) {
  std::map<int32_t, int64_t> lane_end;
  for (Wave& w : plan->waves) {
    w.plan_bytes = MessageBytes(*plan, w);
    int64_t& end = lane_end[w.lane];
    w.lane_offset = end;
    end += w.plan_bytes;
  }
}

absl::Status CheckWaveBytes(const Plan& plan) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::map<int32_t, int64_t> lane_end;
  for (size_t k = 0; k < plan.waves.size(); ++k) {
    const Wave& w = plan.waves[k];
    const int64_t mine = MessageBytes(plan, w);
    if (w.plan_bytes < mine || w.lane_offset < 0 || w.lane_offset > kMax - w.plan_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "wave ", k, " of lane ", w.lane, ": whole-plan bytes ", w.plan_bytes, " at offset ",
          w.lane_offset, " do not hold its messages' ", mine, " bytes"));
    }
    auto it = lane_end.emplace(w.lane, 0).first;
    if (w.lane_offset < it->second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "wave ", k, " of lane ", w.lane, ": offset ", w.lane_offset,
          " overlaps the lane's previous wave, which ends at ", it->second));
    }
    it->second = w.lane_offset + w.plan_bytes;
  }
  return absl::OkStatus();
}

}  // namespace refit
