// Engine dtype conformance: every engine tensor of every built-in model, in
// vLLM's and SGLang's conventions (BF16 and quant=fp8), has the dtype the
// engine itself creates the parameter with. The table below is read from
// the engines' sources, independently of the mapping code:
//   - Mamba2's A: vllm/model_executor/layers/mamba/mamba_mixer2.py creates
//     `A = torch.empty(num_heads // tp, dtype=torch.float32)` and loads
//     -exp(A_log.float()) (SGLang's copy of MambaMixer2 does the same);
//   - the router's e_score_correction_bias: vllm/model_executor/models/
//     deepseek_v2.py creates it `dtype=torch.float32` (f32 in the
//     checkpoints too);
//   - FP8 block scales (weight_scale_inv) and KV-cache scales (k/v/q_scale):
//     float32 parameters in vLLM's fp8 and kv_cache quantization methods;
//   - quantized linear weights under quant=fp8: float8_e4m3fn;
//   - everything else: the model's dtype (bf16).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

DType Expected(const TensorSpec& t, bool fp8) {
  if (absl::EndsWith(t.name, "mixer.A_log")) return DType::kF32;  // engine A
  if (absl::EndsWith(t.name, "e_score_correction_bias")) return DType::kF32;
  if (absl::EndsWith(t.name, "_scale_inv") || absl::EndsWith(t.name, "_scale")) {
    return DType::kF32;
  }
  return fp8 ? DType::kF8E4M3 : DType::kBF16;
}

TEST(EngineDTypesTest, EveryTensorHasTheDtypeTheEngineCreates) {
  int checked = 0;
  for (const std::string& name : BuiltinModelNames()) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    for (const char* spec : {"vllm:tp=1", "sglang:tp=1", "vllm:tp=1,quant=fp8"}) {
      absl::StatusOr<EngineSpec> es = ParseEngineSpec(spec);
      ASSERT_TRUE(es.ok());
      absl::StatusOr<MappedSide> dst = BuildEngineLayout(*c, *es);
      if (!dst.ok()) {
        // A per-tensor FP8 model refuses quant=fp8 (block scales), and the
        // tiny models' dims split 128x128 blocks: both by name.
        EXPECT_TRUE(absl::StrContains(dst.status().message(), "per-tensor FP8") ||
                    absl::StrContains(dst.status().message(), "weight_scale_inv block"))
            << name << " " << spec << ": " << dst.status();
        continue;
      }
      // The model's logical tensors without the engine's own dtypes: which
      // of them the engine quantizes.
      absl::StatusOr<ModelTensors> plain = BuildModelTensors(*c);
      ASSERT_TRUE(plain.ok());
      ModelConfig q = *c;
      if (es->quant.has_value()) ASSERT_TRUE(SetWeightDType(&q, "fp8").ok());
      absl::StatusOr<ModelTensors> quantized = BuildModelTensors(q);
      ASSERT_TRUE(quantized.ok());
      for (const TensorSpec& t : dst->layout.tensors) {
        bool fp8 = false;
        for (const TensorSpec& m : quantized->tensors) {
          if (m.name == t.name) fp8 = m.dtype == DType::kF8E4M3;
        }
        DType want = Expected(t, fp8);
        // Per-tensor FP8 checkpoints keep their own e4m3 weights.
        if (c->quant == QuantFormat::kFp8Tensor && t.dtype == DType::kF8E4M3) want = DType::kF8E4M3;
        // Models that keep other f32 tensors in the checkpoint itself.
        for (const TensorSpec& m : plain->tensors) {
          if (m.name == t.name && m.dtype == DType::kF32) want = DType::kF32;
        }
        EXPECT_EQ(DTypeName(t.dtype), DTypeName(want)) << name << " " << spec << ": " << t.name;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// quant=mxfp8 on every built-in model: refused by name (an FP8 model, or a
// K that is not a multiple of 32), or every e4m3 weight [..., N, K] has a
// uint8 weight_scale [..., N, K/32] and every other tensor keeps the
// engine's BF16 dtype (embeddings, lm_head, norms, router gates).
TEST(EngineDTypesTest, Mxfp8WeightsHaveUint8BlockScalesAndTheRestStays) {
  int quantized = 0;
  for (const std::string& name : BuiltinModelNames()) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    absl::StatusOr<MappedSide> dst =
        BuildEngineLayout(*c, *ParseEngineSpec("vllm:tp=1,quant=mxfp8"));
    if (!dst.ok()) {
      EXPECT_TRUE(absl::StrContains(dst.status().message(), "multiple of 32") ||
                  absl::StrContains(dst.status().message(), "already FP8"))
          << name << ": " << dst.status();
      continue;
    }
    std::map<std::string, const TensorSpec*> by_name;
    for (const TensorSpec& t : dst->layout.tensors) by_name[t.name] = &t;
    for (const TensorSpec& t : dst->layout.tensors) {
      if (t.dtype == DType::kF8E4M3) {
        ++quantized;
        auto it = by_name.find(t.name + "_scale");
        ASSERT_NE(it, by_name.end()) << name << ": " << t.name;
        std::vector<int64_t> want = t.shape;
        want.back() /= 32;
        EXPECT_EQ(it->second->dtype, DType::kU8) << name << ": " << t.name;
        EXPECT_EQ(it->second->shape, want) << name << ": " << t.name;
        EXPECT_EQ(t.shape.back() % 32, 0) << name << ": " << t.name;
      } else if (t.dtype == DType::kU8) {
        EXPECT_TRUE(absl::EndsWith(t.name, "weight_scale")) << name << ": " << t.name;
      }
      if (absl::StrContains(t.name, "embed_tokens") || absl::StrContains(t.name, "lm_head") ||
          absl::StrContains(t.name, "norm") || absl::EndsWith(t.name, "mlp.gate.weight")) {
        EXPECT_NE(t.dtype, DType::kF8E4M3) << name << ": " << t.name;
      }
    }
  }
  EXPECT_GT(quantized, 100);
}

// quant=nvfp4 on every built-in model: refused by name (an FP8 model, or a
// K that is not a multiple of 16), or every packed u8 weight [..., N, K/2]
// has an f8e4m3 weight_scale [..., N, K/16]; every engine parameter buffer
// of packed weights has one f32 global scale buffer (weight_global_scale
// 0-dim, or w13/w2_weight_scale_2 [E_local]); embeddings, lm_head, norms and
// router gates stay unpacked.
TEST(EngineDTypesTest, Nvfp4WeightsHaveE4m3BlockScalesAndOneGlobalPerParameter) {
  int quantized = 0, globals = 0;
  for (const std::string& name : BuiltinModelNames()) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    absl::StatusOr<MappedSide> dst =
        BuildEngineLayout(*c, *ParseEngineSpec("vllm:tp=2,quant=nvfp4"));
    if (!dst.ok()) {
      EXPECT_TRUE(absl::StrContains(dst.status().message(), "multiple of 16") ||
                  absl::StrContains(dst.status().message(), "already FP8"))
          << name << ": " << dst.status();
      continue;
    }
    std::map<std::string, const TensorSpec*> by_name;
    for (const TensorSpec& t : dst->layout.tensors) by_name[t.name] = &t;
    for (const TensorSpec& t : dst->layout.tensors) {
      if (t.dtype == DType::kU8) {
        ++quantized;
        auto it = by_name.find(t.name + "_scale");
        ASSERT_NE(it, by_name.end()) << name << ": " << t.name;
        std::vector<int64_t> want = t.shape;
        want.back() /= 8;
        EXPECT_EQ(it->second->dtype, DType::kF8E4M3) << name << ": " << t.name;
        EXPECT_EQ(it->second->shape, want) << name << ": " << t.name;
      }
      if (absl::StrContains(t.name, "embed_tokens") || absl::StrContains(t.name, "lm_head") ||
          absl::StrContains(t.name, "norm") || absl::EndsWith(t.name, "mlp.gate.weight")) {
        EXPECT_NE(t.dtype, DType::kU8) << name << ": " << t.name;
      }
    }
    const MappedSide& side = *dst;
    std::map<std::string, const BufferInfo*> bufs;
    for (int32_t b = side.rank_begin[0]; b < side.rank_begin[1]; ++b) {
      bufs[side.layout.buffers[b].name] = &side.buffer_info[b];
    }
    for (const auto& [bname, info] : bufs) {
      if (info->dtype != DType::kU8 || absl::EndsWith(bname, "_scale")) continue;
      const bool moe = absl::StrContains(bname, "experts.w");
      const std::string g =
          bname + (moe ? "_scale_2" : "_global_scale");
      auto it = bufs.find(g);
      ASSERT_NE(it, bufs.end()) << name << ": " << bname;
      EXPECT_EQ(it->second->dtype, DType::kF32);
      EXPECT_EQ(it->second->shape.size(), info->shape.size() - 2) << name << ": " << g;
      ++globals;
    }
  }
  EXPECT_GT(quantized, 100);
  EXPECT_GT(globals, 20);
}

}  // namespace
}  // namespace refit
