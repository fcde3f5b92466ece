// Relay plans of real models against their relay-aware bound (`refit plan
// ... --relay=on`): one engine or several of different layouts, on their
// own hosts or colocated with the trainer on hosts of 4 GPUs. Each plan is
// within 1.05x of its bound, and the bound is no more than the plan.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "job/job_plan.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {
namespace {

struct Case {
  const char* model;
  const char* trainer;
  const char* engines;  // ';' between engines
  int32_t gpus_per_host;
  bool colocated;
};

// The plan of `c` with relays, as `refit plan` builds it.
absl::StatusOr<Plan> RelayPlan(const Case& c) {
  JobSpec spec;
  absl::StatusOr<ModelConfig> model = LoadModelConfig(c.model);
  if (!model.ok()) return model.status();
  spec.model = *model;
  absl::StatusOr<TrainerSpec> trainer = ParseTrainerSpec(c.trainer);
  if (!trainer.ok()) return trainer.status();
  spec.trainer = *trainer;
  int32_t engine_world = 0;
  for (absl::string_view one : absl::StrSplit(c.engines, ';')) {
    absl::StatusOr<EngineSpec> e = ParseEngineSpec(std::string(one));
    if (!e.ok()) return e.status();
    spec.engines.push_back(JobEngine{absl::StrCat("engine", spec.engines.size()), *e});
    engine_world += e->world_size();
  }
  spec.placement = ShorthandPlacement(spec.trainer.world_size(), engine_world, c.gpus_per_host,
                                      c.colocated);
  spec.planner.relay = true;
  return BuildJobPlan(spec);
}

TEST(RelayBoundTest, RelayPlansComeWithin5PercentOfTheirBound) {
  const Case cases[] = {
      // Two engines of different TP sizes on one host: a TP2 rank's half
      // is two TP4 ranks' quarters.
      {"qwen3-30b-a3b", "megatron:tp=2,ep=8,etp=1,dp=4", "vllm:tp=4;vllm:tp=2,dp=2", 8, false},
      {"qwen3-30b-a3b", "megatron:tp=2,ep=8,etp=1,dp=4", "vllm:tp=8;vllm:tp=2,dp=4", 8, false},
      {"qwen3-30b-a3b", "megatron:tp=2,ep=8,etp=1,dp=4", "vllm:tp=4;vllm:tp=2,dp=2", 4, false},
      {"qwen3-30b-a3b", "megatron:tp=4,ep=8,etp=1,dp=2", "vllm:tp=4;vllm:tp=2,dp=2", 8, false},
      {"qwen3-8b", "megatron:tp=8", "vllm:tp=8;vllm:tp=2,dp=2;vllm:tp=1,dp=2", 8, false},
      // Colocated on hosts of 4 GPUs: on each host only the ranks that need
      // the other host's half can take it in.
      {"llama-3.1-70b", "megatron:tp=8", "vllm:tp=2,dp=4,quant=fp8", 4, true},
      {"qwen3-8b", "megatron:tp=8", "vllm:tp=1,dp=8", 4, true},
      // One engine, many replicas.
      {"qwen3-8b", "megatron:tp=8", "vllm:tp=8,dp=16", 8, false},
      {"qwen3-30b-a3b", "megatron:tp=2,ep=8,etp=1,dp=8", "vllm:tp=4,dp=16", 8, false},
  };
  for (const Case& c : cases) {
    const std::string what = absl::StrCat(c.model, " ", c.trainer, " -> ", c.engines,
                                          ", gpus_per_host=", c.gpus_per_host,
                                          c.colocated ? ", colocated" : "");
    absl::StatusOr<Plan> plan = RelayPlan(c);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
    EXPECT_LE(plan->stats.lower_bound_seconds, plan->stats.predicted_seconds * (1 + 1e-12))
        << what;
    EXPECT_LE(plan->stats.predicted_seconds, 1.05 * plan->stats.lower_bound_seconds) << what;
  }
}

}  // namespace
}  // namespace refit
