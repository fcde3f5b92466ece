// PlanCase (see planned_case.h).
#include "testing/planned_case.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {
namespace testing {

absl::Status PlanCase(const std::string& model, const std::string& trainer,
                      const std::string& engine, PlannedCase* out,
                      const PlannerOptions& options) {
  const std::string what = absl::StrCat(model, " ", trainer, " -> ", engine);
  auto annotate = [&](const absl::Status& s) { return AnnotateStatus(s, what); };
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model);
  if (!config.ok()) return annotate(config.status());
  out->model = *std::move(config);
  absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(trainer);
  if (!ts.ok()) return annotate(ts.status());
  absl::StatusOr<EngineSpec> es = ParseEngineSpec(engine);
  if (!es.ok()) return annotate(es.status());
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*out->model, *ts);
  if (!src.ok()) return annotate(src.status());
  out->src = *std::move(src);
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*out->model, *es);
  if (!dst.ok()) return annotate(dst.status());
  out->dst = *std::move(dst);
  absl::StatusOr<Plan> plan = BuildPlan(out->src->layout, out->dst->layout, options);
  if (!plan.ok()) return annotate(plan.status());
  out->plan = *std::move(plan);
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace refit
