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

}  // namespace
}  // namespace refit
