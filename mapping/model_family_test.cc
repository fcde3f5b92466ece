#include "mapping/model_family.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

std::map<std::string, TensorSpec> ByName(const ModelTensors& m) {
  std::map<std::string, TensorSpec> out;
  for (const TensorSpec& t : m.tensors) out[t.name] = t;
  return out;
}

TEST(ModelFamilyTest, NemotronHybridBlocksHaveTheirHfTensors) {
  auto c = LoadModelConfig("tiny-nemotron-h");  // "M*M-E", kv scales
  ASSERT_TRUE(c.ok()) << c.status();
  auto m = BuildModelTensors(*c);
  ASSERT_TRUE(m.ok()) << m.status();
  auto t = ByName(*m);
  // Mamba2: in_proj rows = 2*16 + 2*(2*4) + 4 heads.
  EXPECT_EQ(t.at("backbone.layers.0.mixer.in_proj.weight").shape,
            (std::vector<int64_t>{52, 16}));
  EXPECT_EQ(t.at("backbone.layers.0.mixer.conv1d.weight").shape,
            (std::vector<int64_t>{32, 1, 4}));
  EXPECT_EQ(t.at("backbone.layers.2.mixer.A_log").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(t.count("backbone.layers.1.mixer.q_proj.weight"), 1u);
  EXPECT_EQ(t.at("backbone.layers.1.mixer.k_scale").dtype, DType::kF32);
  EXPECT_TRUE(t.at("backbone.layers.1.mixer.k_scale").shape.empty());
  EXPECT_EQ(t.count("backbone.layers.1.mixer.up_proj.weight"), 0u);
  EXPECT_EQ(t.at("backbone.layers.3.mixer.up_proj.weight").shape,
            (std::vector<int64_t>{24, 16}));
  // Non-gated MoE: up/down only, stacked over 4 experts; fp32 router bias.
  const TensorSpec& up = t.at("backbone.layers.4.mixer.experts.{}.up_proj.weight");
  EXPECT_TRUE(up.stacked);
  EXPECT_EQ(up.shape, (std::vector<int64_t>{4, 8, 16}));
  EXPECT_EQ(t.count("backbone.layers.4.mixer.experts.{}.gate_proj.weight"), 0u);
  EXPECT_EQ(t.at("backbone.layers.4.mixer.gate.e_score_correction_bias").dtype,
            DType::kF32);
  EXPECT_EQ(t.at("backbone.layers.4.mixer.shared_experts.up_proj.weight").shape,
            (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(t.count("backbone.embeddings.weight"), 1u);
  EXPECT_EQ(t.count("backbone.norm_f.weight"), 1u);
  EXPECT_EQ(t.count("lm_head.weight"), 1u);
  EXPECT_EQ(m->tensors.size(), t.size()) << "names are unique";
}

TEST(ModelFamilyTest, DeepseekFp8HasBlockScalesButRouterStaysBf16) {
  auto c = LoadModelConfig("tiny-deepseek-v3-fp8");
  ASSERT_TRUE(c.ok()) << c.status();
  auto m = BuildModelTensors(*c);
  ASSERT_TRUE(m.ok()) << m.status();
  auto t = ByName(*m);
  EXPECT_EQ(t.at("model.layers.0.self_attn.kv_a_proj_with_mqa.weight").dtype,
            DType::kF8E4M3);
  // [128 + 64, 256] -> scale [ceil(192/128), 256/128].
  const TensorSpec& s =
      t.at("model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv");
  EXPECT_EQ(s.dtype, DType::kF32);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.at("model.layers.1.mlp.experts.{}.down_proj.weight_scale_inv").shape,
            (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(t.at("model.layers.1.mlp.gate.weight").dtype, DType::kBF16);
  EXPECT_EQ(t.count("model.layers.1.mlp.gate.weight_scale_inv"), 0u);
  EXPECT_EQ(t.at("model.embed_tokens.weight").dtype, DType::kBF16);
  EXPECT_EQ(t.count("model.layers.0.mlp.gate_proj.weight"), 1u);  // first dense
  EXPECT_EQ(t.count("model.layers.0.mlp.experts.{}.gate_proj.weight"), 0u);
}

TEST(ModelFamilyTest, TiedQwen3HasQkNormAndNoLmHead) {
  auto c = LoadModelConfig("tiny-qwen3");
  auto m = BuildModelTensors(*c);
  ASSERT_TRUE(m.ok()) << m.status();
  auto t = ByName(*m);
  EXPECT_EQ(t.count("lm_head.weight"), 0u);
  EXPECT_EQ(t.at("model.layers.2.self_attn.q_norm.weight").shape,
            (std::vector<int64_t>{8}));
  EXPECT_EQ(m->Find(-1, Role::kLmHead), -1);
}

TEST(ModelFamilyTest, ScaleNames) {
  EXPECT_EQ(ScaleName("a.qkv_proj.weight"), "a.qkv_proj.weight_scale_inv");
  EXPECT_EQ(ScaleName("x.linear_fc1.weight3"), "x.linear_fc1.weight_scale_inv3");
  EXPECT_EQ(ScaleName("m.experts.w13_weight"), "m.experts.w13_weight_scale_inv");
}

}  // namespace
}  // namespace refit
