// RunPlanFunction and AssembleMemberPlans (see plan_assembly.h).
#include "server/plan_assembly.h"

#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "server/registration.h"

namespace refit {

absl::StatusOr<BuiltPlan> RunPlanFunction(const PlanFunction& plan,
                                          const PlanInput& input) {
  if (absl::Status s = CheckDataPlane(input.trainer, input.engine); !s.ok()) return s;
  absl::StatusOr<BuiltPlan> built = absl::InternalError("plan function: not run");
  // A plan function that throws (std::bad_alloc on a plan too large for
  // this host) fails this plan only, never refitd.
  try {
    built = plan(input.trainer, input.engine);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the plan function ran out of memory (std::bad_alloc): the plan is too "
        "large for this host");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the plan function threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("the plan function threw a non-standard exception");
  }
  if (built.ok() && (built->trainer_slices.size() != input.trainer.size() ||
                     built->engine_slices.size() != input.engine.size())) {
    return absl::InternalError("plan function returned the wrong number of slices");
  }
  return built;
}

std::map<std::string, MemberPlan> AssembleMemberPlans(
    const PlanInput& input, const BuiltPlan& built,
    const std::string& plan_fingerprint, const std::string& kv_prefix) {
  std::map<std::string, int> engine_index;
  for (const v1::Registration& r : input.engine) {
    engine_index.emplace(r.identity().engine_id(), 0);
  }
  int k = 0;
  for (auto& [e, i] : engine_index) i = k++;
  const size_t num_trainer = input.trainer.size();
  std::map<std::string, MemberPlan> out;
  for (size_t i = 0; i < input.ids.size(); ++i) {
    const bool is_trainer = i < num_trainer;
    MemberPlan mp;
    mp.head.set_epoch(input.epoch);
    mp.head.set_fingerprint(plan_fingerprint);
    v1::Bootstrap* b = mp.head.mutable_bootstrap();
    b->set_global_rank(static_cast<int>(i));
    b->set_global_world(static_cast<int>(input.ids.size()));
    b->set_num_lanes(built.num_lanes);
    b->set_kv_prefix(absl::StrCat(kv_prefix, "/", plan_fingerprint, "/"));
    b->set_engine_index(
        is_trainer ? -1
                   : engine_index[input.engine[i - num_trainer].identity().engine_id()]);
    mp.trainer = is_trainer;
    mp.index = is_trainer ? i : i - num_trainer;
    out[input.ids[i]] = std::move(mp);
  }
  return out;
}

}  // namespace refit
