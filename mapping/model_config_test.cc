#include "mapping/model_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

TEST(ModelConfigTest, BuiltinRealConfigsParseWithTheirPublicDimensions) {
  auto q = LoadModelConfig("qwen3-30b-a3b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->family, ModelFamily::kQwen3Moe);
  EXPECT_EQ(q->num_experts, 128);
  EXPECT_EQ(q->moe_intermediate_size, 768);
  EXPECT_EQ(q->num_kv_heads, 4);
  EXPECT_TRUE(q->qk_norm);

  auto d = LoadModelConfig("deepseek-v3");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(d->num_experts, 256);
  EXPECT_EQ(d->first_k_dense, 3);
  EXPECT_EQ(d->quant, QuantFormat::kFp8Block);
  EXPECT_EQ(d->fp8_block, 128);
  EXPECT_TRUE(d->router_bias);
  EXPECT_EQ(d->q_lora_rank, 1536);
  EXPECT_EQ(d->shared_intermediate_size, 2048);

  auto k = LoadModelConfig("kimi-k2");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->num_experts, 384);
  EXPECT_EQ(k->num_heads, 64);

  auto l = LoadModelConfig("llama-3.1-70b");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->head_dim, 128);
  EXPECT_FALSE(l->qk_norm);

  auto n = LoadModelConfig("nemotron-h-8b");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->hybrid_pattern.size(), 52u);
  EXPECT_EQ(n->mamba_intermediate(), 8192);
  EXPECT_EQ(n->mamba_in_proj_dim(), 2 * 8192 + 2 * 8 * 128 + 128);

  for (const std::string& name : BuiltinModelNames()) {
    EXPECT_TRUE(LoadModelConfig(name).ok()) << name;
  }
}

// transformers builds mlp.gate.e_score_correction_bias for every DeepSeek-V3
// (tools/hf_conformance.py); vLLM and SGLang only for noaux_tc routing.
TEST(ModelConfigTest, DeepseekV3RouterBiasFollowsTopkMethod) {
  const std::string base = R"({"model_type": "deepseek_v3", "hidden_size": 16,
      "num_attention_heads": 4, "intermediate_size": 24,
      "moe_intermediate_size": 8, "n_routed_experts": 8, "n_shared_experts": 1,
      "num_hidden_layers": 2, "vocab_size": 96, "kv_lora_rank": 8,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4)";
  auto absent = ParseModelConfig(base + "}");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_TRUE(absent->router_bias);
  auto noaux = ParseModelConfig(base + R"(, "topk_method": "noaux_tc"})");
  ASSERT_TRUE(noaux.ok()) << noaux.status();
  EXPECT_TRUE(noaux->router_bias);
  auto greedy = ParseModelConfig(base + R"(, "topk_method": "greedy"})");
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_FALSE(greedy->router_bias);
  auto bad = ParseModelConfig(base + R"(, "topk_method": 3})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("topk_method"));
}

TEST(ModelConfigTest, MissingFieldIsNamed) {
  auto c = ParseModelConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_attention_heads": 2, "intermediate_size": 4, "vocab_size": 10})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("num_hidden_layers"));
}

TEST(ModelConfigTest, WrongTypeAndUnknownModelTypeAreNamed) {
  auto c = ParseModelConfig(R"({"model_type": "llama", "hidden_size": "8"})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("hidden_size"));
  auto u = ParseModelConfig(R"({"model_type": "gpt2"})");
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(u.status().message(), HasSubstr("gpt2"));
  auto bad = ParseModelConfig("{not json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelConfigTest, OutOfRangeAndZeroDimensionsAreErrors) {
  auto big = ParseModelConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_attention_heads": 2, "intermediate_size": 4, "vocab_size": 10,
      "num_hidden_layers": 2, "num_key_value_heads": 99999999999999})");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("num_key_value_heads"));
  auto zero = ParseModelConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_attention_heads": 0, "intermediate_size": 4, "vocab_size": 10,
      "num_hidden_layers": 2})");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("num_attention_heads"));
  // Counts that would size a layout of billions of records.
  auto layers = ParseModelConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_attention_heads": 2, "intermediate_size": 4, "vocab_size": 10,
      "num_hidden_layers": 2000000000, "num_key_value_heads": 2})");
  ASSERT_FALSE(layers.ok());
  EXPECT_THAT(layers.status().message(), HasSubstr("num_hidden_layers"));
  auto experts = ParseModelConfig(R"({"model_type": "qwen3_moe", "hidden_size": 8,
      "num_attention_heads": 2, "vocab_size": 10, "num_hidden_layers": 4096,
      "intermediate_size": 4,
      "num_key_value_heads": 2, "head_dim": 4, "num_experts": 8192,
      "moe_intermediate_size": 4, "num_experts_per_tok": 2})");
  ASSERT_FALSE(experts.ok());
  EXPECT_THAT(experts.status().message(), HasSubstr("num_experts"));
}

TEST(ModelConfigTest, HybridPatternLengthMustMatchLayers) {
  auto c = ParseModelConfig(R"({"model_type": "nemotron_h", "hidden_size": 8,
      "num_hidden_layers": 3, "hybrid_override_pattern": "M*",
      "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10,
      "mamba_num_heads": 2, "mamba_head_dim": 4, "ssm_state_size": 4,
      "n_groups": 1, "conv_kernel": 4})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("hybrid_override_pattern"));
}

TEST(ModelConfigTest, WeightDTypeOverride) {
  auto d = LoadModelConfig("deepseek-v3");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(SetWeightDType(&*d, "bf16").ok());
  EXPECT_FALSE(d->quant.has_value());
  EXPECT_EQ(d->fp8_block, 0);
  ASSERT_TRUE(SetWeightDType(&*d, "fp8").ok());
  EXPECT_EQ(d->quant, QuantFormat::kFp8Block);
  EXPECT_EQ(d->fp8_block, 128);
  auto q = LoadModelConfig("tiny-qwen3-moe-fp8");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->quant, QuantFormat::kFp8Tensor);
  EXPECT_EQ(q->fp8_block, 0);
  ASSERT_TRUE(SetWeightDType(&*q, "fp8").ok());
  EXPECT_EQ(q->quant, QuantFormat::kFp8Tensor);
  EXPECT_EQ(q->fp8_block, 0);
  absl::Status s = SetWeightDType(&*q, "int4");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("int4"));
}

TEST(ModelConfigTest, UnknownNameOrPathIsNotFound) {
  auto c = LoadModelConfig("no-such-model");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("deepseek-v3"));
}

}  // namespace
}  // namespace refit
