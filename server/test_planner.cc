// NameMatchingPlan: a mapping-free plan function for control-plane tests.
#include "server/test_planner.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<BuiltPlan> NameMatchingPlan(const std::vector<v1::Registration>& trainer,
                                           const std::vector<v1::Registration>& engine) {
  // buffer name -> (trainer index, byte size)
  std::map<std::string, std::pair<int, int64_t>> src;
  for (int t = 0; t < static_cast<int>(trainer.size()); ++t) {
    for (const auto& b : trainer[t].buffers()) src[b.name()] = {t, b.byte_size()};
  }
  BuiltPlan plan;
  plan.num_lanes = 2;
  plan.trainer_slices.resize(trainer.size());
  plan.engine_slices.resize(engine.size());
  for (int e = 0; e < static_cast<int>(engine.size()); ++e) {
    for (const auto& b : engine[e].buffers()) {
      auto it = src.find(b.name());
      if (it == src.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine ", engine[e].identity().engine_id(), " rank ",
            engine[e].identity().rank(), " buffer ", b.name(),
            ": no trainer rank holds it"));
      }
      if (it->second.second != b.byte_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "buffer ", b.name(), ": engine has ", b.byte_size(),
            " bytes, trainer ", it->second.second));
      }
      v1::MessageProto m;
      m.set_src_rank(it->second.first);
      m.set_dst_rank(static_cast<int>(trainer.size()) + e);
      m.set_bytes(b.byte_size());
      *plan.trainer_slices[it->second.first].add_messages() = m;
      *plan.engine_slices[e].add_messages() = m;
    }
  }
  return plan;
}

}  // namespace refit
