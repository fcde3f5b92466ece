#include "mapping/plan_size.h"

#include "gtest/gtest.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

TEST(PlanSizeTest, CountsOneRecordPerTensorPerRankOfAStage) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig("tiny-qwen3");
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<ModelTensors> t = BuildModelTensors(*m);
  ASSERT_TRUE(t.ok());
  const int64_t n = static_cast<int64_t>(t->tensors.size());
  TrainerSpec ts = *ParseTrainerSpec("megatron:tp=2,pp=2,dp=2");
  EngineSpec a = *ParseEngineSpec("vllm:tp=2");
  EngineSpec b = *ParseEngineSpec("vllm:tp=1,dp=3");
  absl::StatusOr<int64_t> r = EstimatePlanRecords(*m, ts, {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, n * 8 / 2 + n * 2 + n * 3);
}

TEST(PlanSizeTest, StackedTensorsCountTheExpertsEachRankHolds) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig("tiny-qwen3-moe");
  ASSERT_TRUE(m.ok()) << m.status();
  m->num_layers = 64;
  absl::StatusOr<ModelTensors> t = BuildModelTensors(*m);
  ASSERT_TRUE(t.ok());
  int64_t stacked = 0, experts = 0;
  for (const TensorSpec& spec : t->tensors) {
    if (!spec.stacked) continue;
    ++stacked;
    experts = spec.shape[0];
  }
  ASSERT_GT(stacked, 0);
  ASSERT_EQ(experts % (2 * kExpertsPerRecordEstimate), 0);
  const int64_t n = static_cast<int64_t>(t->tensors.size());
  // Every engine rank holds every expert; trainer ranks with ep=2 half.
  TrainerSpec ts = *ParseTrainerSpec("megatron:tp=1,ep=2,dp=2");
  EngineSpec es = *ParseEngineSpec("vllm:tp=2");
  absl::StatusOr<int64_t> r = EstimatePlanRecords(*m, ts, {es});
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t per_expert = stacked * experts / kExpertsPerRecordEstimate;
  EXPECT_EQ(*r, 2 * (n + per_expert / 2) + 2 * (n + per_expert));
  EXPECT_EQ(*CountRankTensors(*m, ts, {es}), 4 * n);
}

TEST(PlanSizeTest, HugeWorldIsOverTheDefaultBudgetAndNamesIt) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig("tiny-qwen3");
  ASSERT_TRUE(m.ok());
  TrainerSpec ts = *ParseTrainerSpec("megatron:tp=1");
  EngineSpec es = *ParseEngineSpec("vllm:tp=1,dp=1048576");
  absl::StatusOr<int64_t> r = EstimatePlanRecords(*m, ts, {es});
  ASSERT_TRUE(r.ok());
  absl::Status s = CheckPlanBudget(*r, int64_t{16} << 30, "--max_plan_mib");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max_plan_mib"), std::string::npos) << s;
}

TEST(PlanSizeTest, RealScalePlanFitsTheDefaultBudget) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig("deepseek-v3");
  ASSERT_TRUE(m.ok());
  TrainerSpec ts = *ParseTrainerSpec("megatron:tp=1,pp=16,ep=16,dp=16");
  EngineSpec es = *ParseEngineSpec("vllm:tp=32,dp=8");
  absl::StatusOr<int64_t> r = EstimatePlanRecords(*m, ts, {es});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(CheckPlanBudget(*r, int64_t{16} << 30, "budget").ok());
}

// The buffers every rank of a side registers, in all.
int64_t RegisteredBuffers(const ModelConfig& m, bool trainer, const std::string& convention,
                          int32_t world) {
  absl::StatusOr<MappedSide> side = BuildSideLayout(m, trainer, convention);
  if (!side.ok()) return -1;
  int64_t n = 0;
  for (int32_t r = 0; r < world; ++r) n += static_cast<int64_t>(RankBuffers(*side, r).size());
  return n;
}

TEST(PlanSizeTest, RealModelsPassTheRegisteredBufferChecks) {
  struct Case {
    const char* model;
    const char* trainer;
    const char* engine;
  };
  for (const Case& c : {Case{"qwen3-8b", "megatron:tp=2,pp=2", "vllm:tp=2"},
                        Case{"qwen3-30b-a3b", "megatron:pp=2,ep=2,dp=2", "vllm:tp=4"},
                        Case{"deepseek-v3", "megatron:pp=4,ep=2,dp=2,experts=grouped", "vllm:tp=8"},
                        Case{"nemotron-h-8b", "fsdp:dp=4", "sglang:tp=2"},
                        Case{"tiny-qwen3-moe", "megatron:tp=1", "vllm:tp=1"}}) {
    SCOPED_TRACE(c.model);
    absl::StatusOr<ModelConfig> m = LoadModelConfig(c.model);
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(c.trainer);
    absl::StatusOr<EngineSpec> es = ParseEngineSpec(c.engine);
    ASSERT_TRUE(ts.ok() && es.ok());
    const int64_t registered = RegisteredBuffers(*m, true, c.trainer, ts->world_size()) +
                               RegisteredBuffers(*m, false, c.engine, es->world_size());
    ASSERT_GT(registered, 0);
    EXPECT_TRUE(CheckRegisteredBuffers(*m, *ts, {*es}, registered).ok());
    absl::StatusOr<int64_t> records = CountRankTensors(*m, *ts, {*es});
    ASSERT_TRUE(records.ok());
    EXPECT_TRUE(CheckRecordsAgainstRegistered(*records, registered).ok())
        << *records << " records, " << registered << " buffers";
  }
}

TEST(PlanSizeTest, LayersBeyondTheRegisteredBuffersAreRefusedNamingTheField) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig("tiny-qwen3-moe");
  ASSERT_TRUE(m.ok());
  m->num_layers = 65536;
  TrainerSpec ts = *ParseTrainerSpec("megatron:tp=1");
  EngineSpec es = *ParseEngineSpec("vllm:tp=1");
  absl::Status s = CheckRegisteredBuffers(*m, ts, {es}, 102);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_hidden_layers = 65536"), std::string::npos) << s;
  EXPECT_EQ(CheckRecordsAgainstRegistered(4001, 1000).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckRecordsAgainstRegistered(4000, 1000).ok());
}

}  // namespace
}  // namespace refit
