// End-to-end tests of the conventions: for tiny models of every family,
// each trainer layout and each engine layout, the expected local buffers of
// both sides are written HERE by explicit slicing and concatenation of the
// full checkpoint tensors (an independent statement of each convention, not
// a call into the tables). Then: every rank's expected buffers must pass
// ValidateRankBuffers against the layout, every record must address the
// right bytes of those buffers, and the planner's plan (BuildPlan, performed
// by ReferenceCopy) from the trainer buffers must reproduce every engine
// buffer byte for byte (padding zero).
// The statements themselves live in testing/conventions_reference.h.
#include <algorithm>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "testing/conventions_reference.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using testing::Fsdp;
using testing::Megatron;
using testing::MegatronOpts;
using testing::RunCase;
using testing::TrainerExpect;

// --- dense GQA ---------------------------------------------------------------

TEST(ConventionsTest, LlamaMegatronUnevenPipelineToVllmTpAboveKvHeads) {
  // 5 layers over pp=2: 3 + 2; vLLM tp=4 > 2 kv heads: each kv head on 2 ranks.
  RunCase("tiny-llama", "megatron:tp=2,pp=2,dp=1", Megatron({2, 2, 1}),
          "vllm:tp=4", 4, 1, false);
}

TEST(ConventionsTest, LlamaMegatronFirstLastStagesToVllmDp) {
  MegatronOpts o{1, 3, 2};
  o.first = 1;
  o.last = 1;
  // first=1, last=1 leave 3 layers for the one middle stage.
  RunCase("tiny-llama", "megatron:tp=1,pp=3,dp=2,first=1,last=1", Megatron(o),
          "vllm:tp=2,dp=2", 2, 2, false);
}

TEST(ConventionsTest, LlamaFsdpToVllm) {
  RunCase("tiny-llama", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3TiedEmbeddingsQkNormMegatronPipelineToVllm) {
  RunCase("tiny-qwen3", "megatron:tp=2,pp=2,dp=2", Megatron({2, 2, 2}),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3HsdpToVllmTpEqualKvHeads) {
  RunCase("tiny-qwen3", "fsdp:dp=4,shard=2", Fsdp(4, 2), "vllm:tp=2,dp=2", 2, 2,
          false);
}

TEST(ConventionsTest, Qwen2QkvBiasOneKvHeadReplicated) {
  RunCase("tiny-qwen2", "megatron:tp=1,pp=2,dp=2", Megatron({1, 2, 2}),
          "vllm:tp=4", 4, 1, false);
}

// --- Qwen3-MoE ---------------------------------------------------------------

TEST(ConventionsTest, Qwen3MoeIndexedExpertsEpToVllmTpShardedExperts) {
  MegatronOpts o{2, 1, 2};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-qwen3-moe", "megatron:tp=2,dp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3MoeGroupedChunkInterleavedToVllmExpertParallel) {
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  o.grouped = true;
  o.chunk = 2;
  RunCase("tiny-qwen3-moe",
          "megatron:tp=2,dp=2,ep=4,etp=1,experts=grouped,glu_chunk=2",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, Qwen3MoeExpertTensorParallelPipeline) {
  MegatronOpts o{2, 3, 1};
  o.ep = 1;
  o.etp = 2;
  o.chunk = 2;
  RunCase("tiny-qwen3-moe", "megatron:tp=2,pp=3,etp=2,glu_chunk=2", Megatron(o),
          "vllm:tp=1,dp=3,ep=3", 1, 3, true);
}

TEST(ConventionsTest, Qwen3MoeFsdpToVllmEp) {
  RunCase("tiny-qwen3-moe", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2,dp=2,ep=4", 2, 2,
          true);
}

TEST(ConventionsTest, Qwen3MoePerTensorFp8ScalesIndexedChunkedToVllmTp) {
  MegatronOpts o{2, 1, 2};
  o.ep = 2;
  o.etp = 1;
  o.chunk = 4;
  RunCase("tiny-qwen3-moe-fp8", "megatron:tp=2,dp=2,ep=2,etp=1,glu_chunk=4",
          Megatron(o), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3MoePerExpertScalesGroupedToVllmEp) {
  MegatronOpts o{2, 3, 1};
  o.ep = 2;
  o.etp = 1;
  o.grouped = true;
  RunCase("tiny-qwen3-moe-fp8", "megatron:tp=2,pp=3,ep=2,etp=1,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, Qwen3MoePerTensorFp8FsdpToVllmEp) {
  RunCase("tiny-qwen3-moe-fp8", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=1,dp=3,ep=3",
          1, 3, true);
}

// --- DeepSeek-V3 -------------------------------------------------------------

TEST(ConventionsTest, DeepseekMlaSharedExpertsEtpToVllmTp) {
  MegatronOpts o{2, 3, 1};
  o.ep = 1;
  o.etp = 2;
  RunCase("tiny-deepseek-v3", "megatron:tp=2,pp=3,ep=1,etp=2", Megatron(o),
          "vllm:tp=4", 4, 1, false);
}

TEST(ConventionsTest, DeepseekEpNotEqualTpGroupedToVllmEp) {
  MegatronOpts o{1, 1, 4};
  o.ep = 2;
  o.etp = 2;
  o.grouped = true;
  RunCase("tiny-deepseek-v3", "megatron:tp=1,dp=4,ep=2,etp=2,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, DeepseekFsdpToVllm) {
  RunCase("tiny-deepseek-v3", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, DeepseekFp8WeightsAndScalesMegatronToVllmTp) {
  MegatronOpts o{2, 2, 1};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-deepseek-v3-fp8", "megatron:tp=2,pp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, DeepseekFp8FsdpToVllmExpertParallel) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2,dp=2,ep=4",
          2, 2, true);
}

// vLLM --expert-placement-strategy round_robin: engine rank k holds experts
// k, k + ep, ...; with 8 experts over ep = 3 ranks 0 and 1 hold three, rank
// 2 two.
TEST(ConventionsTest, DeepseekRoundRobinExpertsToVllm) {
  MegatronOpts o{1, 1, 4};
  o.ep = 2;
  o.etp = 2;
  o.grouped = true;
  RunCase("tiny-deepseek-v3", "megatron:tp=1,dp=4,ep=2,etp=2,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4,placement=round_robin", 2, 2, true);
  RunCase("tiny-deepseek-v3", "fsdp:dp=2", Fsdp(2, 2),
          "vllm:tp=1,dp=3,ep=3,placement=round_robin", 1, 3, true);
}

TEST(ConventionsTest, DeepseekFp8RoundRobinExpertsWithScales) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=3", Fsdp(3, 3),
          "vllm:tp=2,dp=2,ep=4,placement=round_robin", 2, 2, true);
}

// vLLM ignores round_robin for models without expert groups (it falls back
// to linear), so refit refuses it rather than place experts vLLM does not.
TEST(ConventionsTest, RoundRobinPlacementErrorsNameTheReason) {
  auto q = LoadModelConfig("tiny-qwen3-moe");
  ASSERT_TRUE(q.ok());
  auto es = ParseEngineSpec("vllm:tp=2,dp=2,ep=4,placement=round_robin");
  ASSERT_TRUE(es.ok()) << es.status();
  auto l = BuildEngineLayout(*q, *es);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("n_group = 1"));
  for (const char* bad : {"vllm:tp=2,placement=round_robin",
                          "sglang:tp=2,ep=2,placement=round_robin",
                          "vllm:tp=2,ep=2,placement=striped"}) {
    auto s = ParseEngineSpec(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("placement")) << bad;
  }
  EXPECT_EQ(EngineSpecString(*es), "vllm:tp=2,dp=2,ep=4,placement=round_robin");
}

TEST(ConventionsTest, MlaWithoutQLoraKeepsKvAAlone) {
  const std::string json = R"({"model_type": "deepseek_v3", "hidden_size": 8,
      "num_attention_heads": 4, "intermediate_size": 8, "moe_intermediate_size": 4,
      "n_routed_experts": 4, "first_k_dense_replace": 1, "num_hidden_layers": 2,
      "vocab_size": 50, "q_lora_rank": null, "kv_lora_rank": 4,
      "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2})";
  RunCase(json, "megatron:tp=2,pp=2,etp=1,ep=2", Megatron({2, 2, 1, 2, 1}),
          "vllm:tp=4", 4, 1, false);
  RunCase(json, "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2", 2, 1, false);
}

// --- NemotronH ---------------------------------------------------------------

TEST(ConventionsTest, NemotronHybridNonGatedMoeMegatronToVllmTp) {
  MegatronOpts o{2, 2, 1};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-nemotron-h", "megatron:tp=2,pp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, NemotronGroupedExpertsToVllmExpertParallel) {
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  o.grouped = true;
  RunCase("tiny-nemotron-h", "megatron:tp=2,dp=2,ep=4,etp=1,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, MambaSingleGroupReplicatedOnVllmRejectedByMegatron) {
  const std::string json = R"({"model_type": "nemotron_h", "hidden_size": 8,
      "num_hidden_layers": 2, "hybrid_override_pattern": "M*",
      "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4,
      "mamba_num_heads": 4, "mamba_head_dim": 2, "ssm_state_size": 4,
      "n_groups": 1, "conv_kernel": 4, "vocab_size": 30})";
  RunCase(json, "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2,dp=2", 2, 2, false);
  auto c = ParseModelConfig(json);
  ASSERT_TRUE(c.ok()) << c.status();
  auto s = BuildTrainerLayout(*c, *ParseTrainerSpec("megatron:tp=2"));
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("n_groups"));
}

TEST(ConventionsTest, NemotronFsdpToVllm) {
  RunCase("tiny-nemotron-h", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2,dp=2", 2, 2,
          false);
}

// --- SGLang ------------------------------------------------------------------

TEST(ConventionsTest, SglangDeepseekEpInsideTpGroup) {
  // tp=4, ep=2: experts 0-3 on tp ranks 0-1, 4-7 on 2-3, each split in two.
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  RunCase("tiny-deepseek-v3", "megatron:tp=2,dp=2,ep=4,etp=1", Megatron(o),
          "sglang:tp=4,dp=2,ep=2", 4, 2, false);
}

TEST(ConventionsTest, SglangFp8DeepseekTp) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2", 2, 1,
          false);
}

TEST(ConventionsTest, SglangNemotronAndQwenMoeFullEp) {
  RunCase("tiny-nemotron-h", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2,ep=2", 2, 1,
          false);
  RunCase("tiny-qwen3-moe-fp8", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2,dp=2,ep=2",
          2, 2, false);
}

// --- randomized ----------------------------------------------------------------

// Random small models and layouts (seeded), each checked like the cases above.
TEST(ConventionsTest, RandomModelsAndLayouts) {
  std::mt19937 rng(20261122);
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  for (int iter = 0; iter < 40; ++iter) {
    const int family = iter % 3;  // dense, qwen3_moe, deepseek_v3
    const int64_t kv = pick({1, 2, 4});
    const int64_t heads = kv * pick({1, 2});
    const int64_t hd = pick({2, 4});
    const int64_t hidden = pick({8, 12, 16});
    const int64_t layers = pick({1, 2, 3, 4, 5});
    const int64_t vocab = pick({37, 64, 100, 130});
    const int64_t inter = pick({8, 16, 24});
    const int64_t experts = pick({4, 8});
    const bool tied = rng() % 2;
    std::string json;
    if (family == 0) {
      json = absl::StrCat(R"({"model_type": "qwen3", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "num_key_value_heads": )", kv, R"(, "head_dim": )", hd,
                          R"(, "intermediate_size": )", inter,
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, R"(, "tie_word_embeddings": )", tied ? "true" : "false",
                          "}");
    } else if (family == 1) {
      json = absl::StrCat(R"({"model_type": "qwen3_moe", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "num_key_value_heads": )", kv, R"(, "head_dim": )", hd,
                          R"(, "intermediate_size": )", inter,
                          R"(, "moe_intermediate_size": )", inter / 2,
                          R"(, "num_experts": )", experts,
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, "}");
    } else {
      json = absl::StrCat(R"({"model_type": "deepseek_v3", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "intermediate_size": )", inter,
                          R"(, "moe_intermediate_size": )", inter / 2,
                          R"(, "n_routed_experts": )", experts,
                          R"(, "n_shared_experts": 1, "first_k_dense_replace": )",
                          pick({0, 1}), R"(, "topk_method": "noaux_tc")",
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, R"(, "q_lora_rank": )", pick({0, 6}),
                          R"(, "kv_lora_rank": 4, )",
                          R"("qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2})");
    }
    // Trainer: megatron (tp | kv heads, pp <= layers) or fsdp.
    std::string trainer;
    TrainerExpect expect;
    if (rng() % 4 == 0) {
      const int64_t dp = pick({1, 2, 3}), shard = pick({1, dp});
      trainer = absl::StrCat("fsdp:dp=", dp, ",shard=", shard);
      expect = Fsdp(dp, shard);
    } else {
      MegatronOpts o;
      o.tp = family == 2 ? pick({1, 2}) : std::min<int64_t>(kv, pick({1, 2}));
      if (family == 2 && heads % o.tp != 0) o.tp = 1;
      o.pp = std::min<int64_t>(layers, pick({1, 2, 3}));
      o.dp = pick({1, 2});
      o.etp = pick({1, o.tp});
      const int64_t stage = o.tp * o.dp / o.etp;
      o.ep = pick({1, stage});
      if (experts % o.ep != 0) o.ep = 1;
      o.grouped = rng() % 2;
      o.chunk = (inter / 2 / o.etp) % 2 == 0 ? pick({0, 2}) : 0;
      trainer = absl::StrCat("megatron:tp=", o.tp, ",pp=", o.pp, ",dp=", o.dp,
                             ",ep=", o.ep, ",etp=", o.etp,
                             ",experts=", o.grouped ? "grouped" : "indexed",
                             ",glu_chunk=", o.chunk);
      expect = Megatron(o);
    }
    // Engine: vllm tp | heads (and tp | kv or kv | tp), padded vocab / tp.
    int64_t tp = pick({1, 2, 4});
    while (heads % tp != 0 || (tp % kv != 0 && kv % tp != 0) ||
           ((inter / 2) % tp != 0) || (inter % tp != 0)) {
      tp /= 2;
    }
    const int64_t dp = pick({1, 2});
    const bool ep = family != 0 && rng() % 2 && experts >= tp * dp;
    // DeepSeek (8 expert groups by default) may place experts round-robin.
    const bool round_robin = ep && family == 2 && rng() % 2;
    const std::string engine =
        absl::StrCat("vllm:tp=", tp, ",dp=", dp, ep ? absl::StrCat(",ep=", tp * dp) : "",
                     round_robin ? ",placement=round_robin" : "");
    RunCase(json, trainer, expect, engine, tp, dp, ep);
    if (HasFailure()) {
      ADD_FAILURE() << "iteration " << iter << ": " << json;
      return;
    }
  }
}

// --- impossible layouts --------------------------------------------------------

absl::Status EngineError(const std::string& model, const std::string& engine) {
  auto c = LoadModelConfig(model);
  auto es = ParseEngineSpec(engine);
  if (!c.ok()) return c.status();
  if (!es.ok()) return es.status();
  return BuildEngineLayout(*c, *es).status();
}
absl::Status TrainerError(const std::string& model, const std::string& trainer) {
  auto c = LoadModelConfig(model);
  auto ts = ParseTrainerSpec(trainer);
  if (!c.ok()) return c.status();
  if (!ts.ok()) return ts.status();
  return BuildTrainerLayout(*c, *ts).status();
}

TEST(ConventionsTest, Fp8LayoutSplittingAScaleBlockIsAnError) {
  // q_b_proj has 4 heads x 192 rows: tp=4 gives 192 rows per rank.
  absl::Status s = EngineError("tiny-deepseek-v3-fp8", "vllm:tp=4");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_b_proj"));
  EXPECT_THAT(s.message(), HasSubstr("split a 128x128"));
}

TEST(ConventionsTest, TpNotDividingHeadsIsAnError) {
  absl::Status s = EngineError("tiny-llama", "vllm:tp=8");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_attention_heads"));
  s = TrainerError("tiny-llama", "megatron:tp=4");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("query groups"));
}

TEST(ConventionsTest, EpNotDividingExpertsAndBadPipelineAreErrors) {
  absl::Status s = TrainerError("tiny-qwen3-moe", "megatron:tp=1,dp=3,ep=3");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("experts"));
  s = TrainerError("tiny-llama", "megatron:pp=4,first=1,last=1");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("first=1"));
  s = TrainerError("tiny-qwen3-moe", "megatron:tp=2,ep=1,etp=1,glu_chunk=3");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("glu_chunk"));
}

}  // namespace
}  // namespace refit
