// NameMatchingPlan: a mapping-free plan function for control-plane tests.
#include "testing/name_matching_plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/member_name.h"
#include "proto/plan.pb.h"

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
  std::vector<v1::PlanProto> trainer_slices(trainer.size());
  std::vector<v1::PlanProto> engine_slices(engine.size());
  for (int e = 0; e < static_cast<int>(engine.size()); ++e) {
    for (const auto& b : engine[e].buffers()) {
      auto it = src.find(b.name());
      if (it == src.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            MemberName(/*trainer=*/false, engine[e].identity().engine_id(),
                       engine[e].identity().rank()),
            " buffer ", b.name(), ": no trainer rank holds it"));
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
      *trainer_slices[it->second.first].add_messages() = m;
      *engine_slices[e].add_messages() = m;
      plan.pairs.emplace_back(m.src_rank(), m.dst_rank());
    }
  }
  std::sort(plan.pairs.begin(), plan.pairs.end());
  plan.pairs.erase(std::unique(plan.pairs.begin(), plan.pairs.end()), plan.pairs.end());
  for (const auto& p : trainer_slices) plan.trainer_slices.push_back(p.SerializeAsString());
  for (const auto& p : engine_slices) plan.engine_slices.push_back(p.SerializeAsString());
  return plan;
}

}  // namespace refit
