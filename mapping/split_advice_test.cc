// An engine TP that cannot split the model is explained by every model
// dimension it leaves uneven, attention heads first, and the nearest TP
// sizes that build.
#include "mapping/split_advice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(SplitAdviceTest, HeadsComeFirstAndTheNearestValidTpIsNamed) {
  const ModelConfig model = *LoadModelConfig("qwen3-8b");
  const EngineSpec spec = *ParseEngineSpec("vllm:tp=3");
  absl::StatusOr<MappedSide> layout = BuildEngineLayout(model, spec);
  ASSERT_FALSE(layout.ok());
  const absl::Status s = ExplainEngineSplit(model, spec, layout.status());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(s.message());
  EXPECT_THAT(msg, StartsWith("engine vllm:tp=3,dp=1: num_attention_heads (32) is not "
                              "divisible by tp=3\n"
                              "engine vllm:tp=3,dp=1: num_key_value_heads (8) is neither "
                              "a divisor nor a multiple of tp=3\n"));
  EXPECT_THAT(msg, HasSubstr(std::string(layout.status().message())));  // the layout's own
  EXPECT_THAT(msg, HasSubstr("valid near tp=3: tp=2 (vllm:tp=2"));
  EXPECT_THAT(msg, HasSubstr(", tp=4 (vllm:tp=4"));
}

TEST(SplitAdviceTest, ProblemsListEveryUnevenDimension) {
  const ModelConfig model = *LoadModelConfig("tiny-qwen3");  // 4 heads, 2 KV, 24 wide MLP
  EXPECT_TRUE(TensorParallelProblems(model, 2, true).empty());
  EXPECT_TRUE(TensorParallelProblems(model, 4, true).empty());  // KV heads replicated
  EXPECT_EQ(TensorParallelProblems(model, 3, true).size(), 2u);  // heads, KV heads
  EXPECT_EQ(TensorParallelProblems(model, 8, true).size(), 1u);  // heads
  const EngineSpec spec = *ParseEngineSpec("vllm:tp=3");
  EXPECT_EQ(NearestValidTensorParallel(model, spec), (std::vector<int32_t>{2, 4}));
}

TEST(SplitAdviceTest, OtherErrorsPassThrough) {
  const ModelConfig model = *LoadModelConfig("tiny-qwen3");
  const absl::Status e = absl::NotFoundError("x");
  EXPECT_EQ(ExplainEngineSplit(model, *ParseEngineSpec("vllm:tp=3"), e), e);
}

}  // namespace
}  // namespace refit
