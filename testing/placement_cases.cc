// PlacementCases and PlanPlacementCase (see placement_cases.h).
#include "testing/placement_cases.h"

#include "common/status_macros.h"
#include "job/job_plan.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {

std::vector<PlacementCase> PlacementCases() {
  std::vector<PlacementCase> v;
  // (a) colocated, replicas line up with hosts: no byte crosses hosts.
  v.push_back({"colocated tp2 x dp4, 2 GPUs/host", "qwen3-8b", "megatron:tp=2,dp=4",
               "vllm:tp=2,dp=4", 2, true, false, true});
  v.push_back({"colocated tp8 x dp2, 8 GPUs/host", "llama-3.1-70b",
               "megatron:tp=8,dp=2", "vllm:tp=8,dp=2", 8, true, false, true});
  v.push_back({"colocated fsdp dp8 -> tp4 x dp2, 4 GPUs/host", "qwen3-8b",
               "fsdp:dp=8,shard=4", "vllm:tp=4,dp=2", 4, true, false, false});
  // (b) disaggregated, several trainer DP replicas share engine ingress.
  v.push_back({"disaggregated tp2 x dp4 -> tp2 x dp4", "qwen3-8b",
               "megatron:tp=2,dp=4", "vllm:tp=2,dp=4", 8, false, false, false});
  v.push_back({"disaggregated tp4 x dp4 -> tp2 x dp8", "qwen3-8b",
               "megatron:tp=4,dp=4", "vllm:tp=2,dp=8", 8, false, false, false});
  v.push_back({"disaggregated moe ep4 x dp2 -> tp4 x dp4", "qwen3-30b-a3b",
               "megatron:tp=2,ep=4,etp=1,dp=4", "vllm:tp=4,dp=4", 8, false, false,
               false});
  // (c) DeepSeek-V3 and Kimi-K2 at 256 ranks.
  v.push_back({"deepseek-v3 256 -> 256", "deepseek-v3",
               "megatron:tp=1,pp=16,ep=16,etp=1,dp=16", "vllm:tp=32,dp=8", 8, false,
               true, false});
  v.push_back({"deepseek-v3 256 -> 256 colocated", "deepseek-v3",
               "megatron:tp=1,pp=16,ep=16,etp=1,dp=16", "vllm:tp=32,dp=8", 8, true,
               true, false});
  v.push_back({"kimi-k2 256 -> 128", "kimi-k2", "megatron:tp=1,pp=16,ep=16,etp=1,dp=16",
               "vllm:tp=16,dp=8", 8, false, true, false});
  // (d) colocated, trainer PP stages span hosts: some bytes must cross.
  v.push_back({"colocated tp2 x pp2 x dp2, PP across hosts", "qwen3-8b",
               "megatron:tp=2,pp=2,dp=2", "vllm:tp=2,dp=4", 4, true, false, false});
  return v;
}

absl::StatusOr<Plan> PlanPlacementCase(const PlacementCase& c) {
  JobSpec spec;
  REFIT_ASSIGN_OR_RETURN(spec.model, LoadModelConfig(c.model));
  REFIT_RETURN_IF_ERROR(SetWeightDType(&spec.model, "bf16"));
  REFIT_ASSIGN_OR_RETURN(spec.trainer, ParseTrainerSpec(c.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(c.engine));
  spec.engines.push_back(JobEngine{"engine", es});
  spec.placement = ShorthandPlacement(spec.trainer.world_size(), es.world_size(),
                                      c.gpus_per_host, c.colocated);
  return BuildJobPlan(spec);
}

}  // namespace refit
