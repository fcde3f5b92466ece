// Relay plans of jobs whose trainer and engine ranks share hosts and GPUs
// (`refit plan --colocated --gpus_per_host=N --relay=on`): every engine
// rank receives exactly the bytes the trainer-only plan brings it. These
// placements reject the chains and keep the trees, which start from the
// copies between ranks of one GPU (step 1 of the source choice): each of
// those must keep its trainer replica.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "job/job_plan.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {
namespace {

struct Case {
  const char* trainer;
  const char* engine;
  int32_t gpus_per_host;
};

// Bytes each engine rank receives under `plan`.
std::vector<int64_t> ReceivedPerEngineRank(const Plan& plan) {
  std::vector<int64_t> got(plan.dst.world_size, 0);
  for (const Message& m : plan.messages) got[m.dst_rank] += m.bytes;
  return got;
}

TEST(RelaySourcesTest, ColocatedRelayPlansBringEveryEngineRankItsBytes) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("qwen3-8b");
  ASSERT_TRUE(model.ok()) << model.status();
  for (const Case& c : {Case{"megatron:tp=8", "vllm:tp=1,dp=8", 4},
                        Case{"megatron:tp=2,dp=4", "vllm:tp=4,dp=2", 2},
                        Case{"fsdp:dp=8", "vllm:tp=2,dp=4,quant=fp8", 4}}) {
    const std::string what =
        absl::StrCat(c.trainer, " -> ", c.engine, ", gpus_per_host=", c.gpus_per_host);
    absl::StatusOr<TrainerSpec> trainer = ParseTrainerSpec(c.trainer);
    absl::StatusOr<EngineSpec> engine = ParseEngineSpec(c.engine);
    ASSERT_TRUE(trainer.ok() && engine.ok()) << what;
    std::vector<int64_t> received[2];
    for (bool relay : {false, true}) {
      JobSpec spec{*model, *trainer, {JobEngine{"engine0", *engine}}, {}, {}};
      absl::StatusOr<JobLayouts> layouts = MapJob(spec.model, spec.trainer, spec.engines);
      ASSERT_TRUE(layouts.ok()) << what << ": " << layouts.status();
      spec.placement = ShorthandPlacement(layouts->trainer.layout.world_size,
                                          layouts->engines[0].layout.world_size,
                                          c.gpus_per_host, /*colocated=*/true);
      spec.planner.relay = relay;
      absl::StatusOr<Plan> plan = BuildJobPlan(spec);
      ASSERT_TRUE(plan.ok()) << what << " relay=" << relay << ": " << plan.status();
      received[relay] = ReceivedPerEngineRank(*plan);
    }
    EXPECT_EQ(received[1], received[0]) << what;
  }
}

}  // namespace
}  // namespace refit
