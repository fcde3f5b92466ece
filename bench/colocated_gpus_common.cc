// The two-GPU colocated benchmark's cases and copies (see
// colocated_gpus_common.h).
#include "bench/colocated_gpus_common.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
#include "exec/pull/pull_program.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/planner.h"

namespace refit::bench {

absl::StatusOr<GpusCase> GpusCaseNamed(const std::string& name) {
  if (name == "tp2") return GpusCase{name, "megatron:tp=2", "vllm:tp=2"};
  if (name == "dp2") return GpusCase{name, "megatron:tp=2", "vllm:tp=1,dp=2"};
  return absl::InvalidArgumentError(absl::StrCat("--cases: unknown case ", name,
                                                 " (tp2 or dp2)"));
}

absl::StatusOr<Plan> GpusCasePlan(const GpusCase& c, const std::string& model_name) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(model_name));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(c.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(c.engine));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  for (SideLayout* s : {&src.layout, &dst.layout}) {
    s->host_of_rank.assign(s->world_size, 0);
    s->gpu_of_rank.clear();
    for (int32_t r = 0; r < s->world_size; ++r) s->gpu_of_rank.push_back(r);
  }
  PlannerOptions o;
  o.num_lanes = 1;
  return BuildPlan(std::move(src.layout), std::move(dst.layout), o);
}

absl::StatusOr<EngineCopies> ResolveEngineCopies(const Plan& plan, int e,
                                                 const std::vector<Arena>& trainers,
                                                 const Arena& engine) {
  REFIT_ASSIGN_OR_RETURN(PullProgram program, BuildPullProgram(plan, e));
  std::vector<char*> src(plan.src.buffers.size(), nullptr);
  for (size_t b = 0; b < plan.src.buffers.size(); ++b) {
    const int r = plan.src.buffers[b].rank;
    if (r >= 0 && r < static_cast<int>(trainers.size()) && trainers[r].offset[b] >= 0) {
      src[b] = trainers[r].base + trainers[r].offset[b];
    }
  }
  REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> all,
                         ResolveTasks(program.tasks, src, engine.Pointers(), nullptr, nullptr));
  EngineCopies out;
  const Arena& own = trainers[e];
  for (const ResolvedCopy& c : all) {
    const bool local = c.src >= own.base && c.src < own.base + own.bytes;
    (local ? out.local : out.peer).push_back(c);
    (local ? out.local_bytes : out.peer_bytes) += c.rows * c.row_bytes;
  }
  return out;
}

}  // namespace refit::bench
