#include "mapping/model_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "mapping/builtin_configs.h"
#include "mapping/model_source.h"
#include "nlohmann/json.hpp"

namespace refit {

namespace {

using nlohmann::json;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: field \"", field, "\" ", what));
}

// Reads an integer field; `required` fields must be present.
absl::StatusOr<int64_t> GetInt(const json& j, const char* field, bool required,
                               int64_t fallback = 0) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return FieldError(field, "is missing");
    return fallback;
  }
  if (!it->is_number_integer()) return FieldError(field, "is not an integer");
  return it->get<int64_t>();
}

absl::StatusOr<bool> GetBool(const json& j, const char* field, bool fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(field, "is not a boolean");
  return it->get<bool>();
}

struct FamilyOfType {
  const char* model_type;
  ModelFamily family;
};
constexpr FamilyOfType kFamilies[] = {
    {"llama", ModelFamily::kDense},
    {"mistral", ModelFamily::kDense},
    {"qwen2", ModelFamily::kDense},
    {"qwen3", ModelFamily::kDense},
    {"qwen3_moe", ModelFamily::kQwen3Moe},
    {"deepseek_v3", ModelFamily::kDeepseekV3},
    {"kimi_k2", ModelFamily::kDeepseekV3},
    {"nemotron_h", ModelFamily::kNemotronH},
};

struct HybridChar {
  char c;
  HybridBlock block;
};
constexpr HybridChar kHybridChars[] = {
    {'M', HybridBlock::kMamba},
    {'*', HybridBlock::kAttention},
    {'-', HybridBlock::kMlp},
    {'E', HybridBlock::kMoe},
};

absl::Status Positive(int64_t v, const char* field) {
  if (v <= 0) return FieldError(field, absl::StrCat("must be > 0, got ", v));
  return absl::OkStatus();
}

}  // namespace

absl::string_view ModelFamilyName(ModelFamily f) {
  switch (f) {
    case ModelFamily::kDense:
      return "dense";
    case ModelFamily::kQwen3Moe:
      return "qwen3_moe";
    case ModelFamily::kDeepseekV3:
      return "deepseek_v3";
    case ModelFamily::kNemotronH:
      return "nemotron_h";
  }
  return "unknown";
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  // Bound every dimension so that products of two or three of them cannot
  // overflow int64 before the tensor specs are validated.
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  const std::pair<const char*, int64_t> dims[] = {
      {"hidden_size", c.hidden_size}, {"num_hidden_layers", c.num_layers},
      {"vocab_size", c.vocab_size}, {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads}, {"head_dim", c.head_dim},
      {"intermediate_size", c.intermediate_size},
      {"num_experts", c.num_experts},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"n_shared_experts", c.num_shared_experts},
      {"moe_shared_expert_intermediate_size", c.shared_intermediate_size},
      {"q_lora_rank", c.q_lora_rank}, {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim}, {"v_head_dim", c.v_head_dim},
      {"mamba_num_heads", c.mamba_num_heads},
      {"mamba_head_dim", c.mamba_head_dim},
      {"ssm_state_size", c.ssm_state_size}, {"n_groups", c.n_groups},
      {"conv_kernel", c.conv_kernel}};
  for (const auto& d : dims) {
    if (d.second < 0 || d.second > kMaxDim) {
      return FieldError(d.first, absl::StrCat("= ", d.second, " is out of range"));
    }
  }
  // Counts that size the layouts (a tensor per layer, per expert): a few
  // bytes of config must not make refitd or a member build billions of
  // records. Real models are far below (DeepSeek-V3: 61 x 256).
  constexpr int64_t kMaxLayers = int64_t{1} << 16;
  constexpr int64_t kMaxExperts = int64_t{1} << 16;
  constexpr int64_t kMaxLayerExperts = int64_t{1} << 24;
  if (c.num_layers > kMaxLayers) {
    return FieldError("num_hidden_layers",
                      absl::StrCat("= ", c.num_layers, " exceeds ", kMaxLayers));
  }
  if (c.num_experts > kMaxExperts || c.num_shared_experts > kMaxExperts) {
    return FieldError(c.num_experts > kMaxExperts ? "num_experts" : "n_shared_experts",
                      absl::StrCat("= ", std::max(c.num_experts, c.num_shared_experts),
                                   " exceeds ", kMaxExperts));
  }
  if (c.num_layers * std::max<int64_t>(1, c.num_experts) > kMaxLayerExperts) {
    return FieldError("num_experts",
                      absl::StrCat("x num_hidden_layers = ", c.num_experts, " x ",
                                   c.num_layers, " expert weights exceed ",
                                   kMaxLayerExperts));
  }
  REFIT_RETURN_IF_ERROR(Positive(c.hidden_size, "hidden_size"));
  REFIT_RETURN_IF_ERROR(Positive(c.num_layers, "num_hidden_layers"));
  REFIT_RETURN_IF_ERROR(Positive(c.vocab_size, "vocab_size"));
  REFIT_RETURN_IF_ERROR(Positive(c.num_heads, "num_attention_heads"));
  if (c.family != ModelFamily::kDeepseekV3) {
    REFIT_RETURN_IF_ERROR(Positive(c.num_kv_heads, "num_key_value_heads"));
    REFIT_RETURN_IF_ERROR(Positive(c.head_dim, "head_dim"));
    if (c.num_heads % c.num_kv_heads != 0) {
      return FieldError("num_key_value_heads",
                        absl::StrCat("(", c.num_kv_heads,
                                     ") must divide num_attention_heads (",
                                     c.num_heads, ")"));
    }
  }
  if (c.family == ModelFamily::kDense ||
      c.family == ModelFamily::kDeepseekV3) {
    REFIT_RETURN_IF_ERROR(Positive(c.intermediate_size, "intermediate_size"));
  }
  if (c.family != ModelFamily::kDense) {
    bool has_moe = c.family != ModelFamily::kNemotronH;
    for (HybridBlock b : c.hybrid_pattern) has_moe |= b == HybridBlock::kMoe;
    if (has_moe) {
      REFIT_RETURN_IF_ERROR(Positive(c.num_experts, "num_experts"));
      REFIT_RETURN_IF_ERROR(
          Positive(c.moe_intermediate_size, "moe_intermediate_size"));
      if (c.num_shared_experts > 0) {
        REFIT_RETURN_IF_ERROR(Positive(c.shared_intermediate_size,
                                       "moe_shared_expert_intermediate_size"));
      }
    }
  }
  if (c.family == ModelFamily::kDeepseekV3) {
    REFIT_RETURN_IF_ERROR(Positive(c.kv_lora_rank, "kv_lora_rank"));
    REFIT_RETURN_IF_ERROR(Positive(c.qk_nope_head_dim, "qk_nope_head_dim"));
    REFIT_RETURN_IF_ERROR(Positive(c.qk_rope_head_dim, "qk_rope_head_dim"));
    REFIT_RETURN_IF_ERROR(Positive(c.v_head_dim, "v_head_dim"));
    if (c.q_lora_rank < 0) return FieldError("q_lora_rank", "is negative");
    if (c.first_k_dense < 0 || c.first_k_dense > c.num_layers) {
      return FieldError("first_k_dense_replace", "is out of range");
    }
  }
  if (c.family == ModelFamily::kNemotronH) {
    if (static_cast<int64_t>(c.hybrid_pattern.size()) != c.num_layers) {
      return FieldError(
          "hybrid_override_pattern",
          absl::StrCat("has ", c.hybrid_pattern.size(),
                       " blocks but num_hidden_layers is ", c.num_layers));
    }
    REFIT_RETURN_IF_ERROR(Positive(c.mamba_num_heads, "mamba_num_heads"));
    REFIT_RETURN_IF_ERROR(Positive(c.mamba_head_dim, "mamba_head_dim"));
    REFIT_RETURN_IF_ERROR(Positive(c.ssm_state_size, "ssm_state_size"));
    REFIT_RETURN_IF_ERROR(Positive(c.n_groups, "n_groups"));
    REFIT_RETURN_IF_ERROR(Positive(c.conv_kernel, "conv_kernel"));
    if (c.mamba_num_heads % c.n_groups != 0) {
      return FieldError("n_groups", "must divide mamba_num_heads");
    }
    for (HybridBlock b : c.hybrid_pattern) {
      if (b == HybridBlock::kMlp) {
        REFIT_RETURN_IF_ERROR(
            Positive(c.intermediate_size, "intermediate_size"));
      }
    }
  }
  if (c.fp8_block < 0) return FieldError("weight_block_size", "is negative");
  if (c.quant && IsFp8Block(*c.quant) && c.fp8_block == 0) {
    return FieldError("weight_block_size", "is 0 for FP8 block weights");
  }
  if ((!c.quant || !IsFp8Block(*c.quant)) && c.fp8_block != 0) {
    return FieldError("weight_block_size", "is set, but the weights are not FP8 blocks");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "config.json: not a valid JSON object");
  }
  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) {
    return FieldError("model_type", "is missing or not a string");
  }
  c.model_type = mt->get<std::string>();
  bool known = false;
  for (const FamilyOfType& f : kFamilies) {
    if (c.model_type == f.model_type) {
      c.family = f.family;
      known = true;
    }
  }
  if (!known) {
    std::vector<std::string> names;
    for (const FamilyOfType& f : kFamilies) names.push_back(f.model_type);
    return FieldError("model_type",
                      absl::StrCat("\"", c.model_type,
                                   "\" is not supported (supported: ",
                                   absl::StrJoin(names, ", "), ")"));
  }
  const bool mla = c.family == ModelFamily::kDeepseekV3;
  REFIT_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", true));
  REFIT_ASSIGN_OR_RETURN(c.num_layers, GetInt(j, "num_hidden_layers", true));
  REFIT_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", true));
  REFIT_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                         GetBool(j, "tie_word_embeddings", false));
  REFIT_ASSIGN_OR_RETURN(c.num_heads, GetInt(j, "num_attention_heads", true));
  REFIT_ASSIGN_OR_RETURN(
      c.num_kv_heads, GetInt(j, "num_key_value_heads", false, c.num_heads));
  if (c.num_heads > 0) {
    REFIT_ASSIGN_OR_RETURN(
        c.head_dim, GetInt(j, "head_dim", false, c.hidden_size / c.num_heads));
  }
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  REFIT_ASSIGN_OR_RETURN(c.attention_bias,
                         GetBool(j, "attention_bias", c.model_type == "qwen2"));
  REFIT_ASSIGN_OR_RETURN(c.intermediate_size,
                         GetInt(j, "intermediate_size", !mla &&
                                c.family != ModelFamily::kNemotronH));
  if (mla) REFIT_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true).status());

  // MoE fields: names differ per family.
  const char* experts_field =
      c.family == ModelFamily::kQwen3Moe ? "num_experts" : "n_routed_experts";
  REFIT_ASSIGN_OR_RETURN(
      c.num_experts,
      GetInt(j, experts_field, c.family == ModelFamily::kQwen3Moe || mla));
  REFIT_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                         GetInt(j, "moe_intermediate_size", c.num_experts > 0));
  REFIT_ASSIGN_OR_RETURN(c.num_shared_experts,
                         GetInt(j, "n_shared_experts", false));
  if (c.num_shared_experts > 0) {
    REFIT_ASSIGN_OR_RETURN(
        int64_t per,
        GetInt(j, "moe_shared_expert_intermediate_size", false,
               c.moe_intermediate_size));
    // DeepSeek fuses its shared experts into one MLP of n * moe_intermediate;
    // NemotronH gives the fused size directly.
    c.shared_intermediate_size =
        c.family == ModelFamily::kNemotronH ? per : per * c.num_shared_experts;
  }
  if (c.family == ModelFamily::kQwen3Moe) {
    REFIT_ASSIGN_OR_RETURN(int64_t step,
                           GetInt(j, "decoder_sparse_step", false, 1));
    auto mlp_only = j.find("mlp_only_layers");
    bool has_mlp_only = mlp_only != j.end() && mlp_only->is_array() &&
                        !mlp_only->empty();
    if (step != 1 || has_mlp_only) {
      return FieldError("decoder_sparse_step",
                        "!= 1 or mlp_only_layers non-empty: mixed dense/MoE "
                        "qwen3_moe layers are not supported");
    }
  }
  if (mla) {
    REFIT_ASSIGN_OR_RETURN(c.first_k_dense,
                           GetInt(j, "first_k_dense_replace", false));
    REFIT_ASSIGN_OR_RETURN(int64_t freq, GetInt(j, "moe_layer_freq", false, 1));
    if (freq != 1) return FieldError("moe_layer_freq", "!= 1 is not supported");
    REFIT_ASSIGN_OR_RETURN(c.q_lora_rank, GetInt(j, "q_lora_rank", false));
    REFIT_ASSIGN_OR_RETURN(c.kv_lora_rank, GetInt(j, "kv_lora_rank", true));
    REFIT_ASSIGN_OR_RETURN(c.qk_nope_head_dim,
                           GetInt(j, "qk_nope_head_dim", true));
    REFIT_ASSIGN_OR_RETURN(c.qk_rope_head_dim,
                           GetInt(j, "qk_rope_head_dim", true));
    REFIT_ASSIGN_OR_RETURN(c.v_head_dim, GetInt(j, "v_head_dim", true));
    REFIT_ASSIGN_OR_RETURN(c.num_expert_groups,
                           GetInt(j, "n_group", false,
                                  c.model_type == "deepseek_v3" ? 8 : 1));
    if (c.num_expert_groups < 1) return FieldError("n_group", "must be >= 1");
    // DeepSeek-V3 routes with noaux_tc, and transformers builds (and saves)
    // mlp.gate.e_score_correction_bias whatever the config says; vLLM and
    // SGLang build it only for topk_method == "noaux_tc". A config without
    // the field is a V3 config, so it has the bias; one naming another
    // method has none, as in vLLM.
    auto tm = j.find("topk_method");
    if (tm != j.end() && !tm->is_string()) {
      return FieldError("topk_method", "is not a string");
    }
    c.router_bias = tm == j.end() || tm->get<std::string>() == "noaux_tc";
  }
  if (c.family == ModelFamily::kNemotronH) {
    auto p = j.find("hybrid_override_pattern");
    if (p == j.end() || !p->is_string()) {
      return FieldError("hybrid_override_pattern", "is missing");
    }
    for (char ch : p->get<std::string>()) {
      bool ok = false;
      for (const HybridChar& h : kHybridChars) {
        if (h.c == ch) {
          c.hybrid_pattern.push_back(h.block);
          ok = true;
        }
      }
      if (!ok) {
        return FieldError("hybrid_override_pattern",
                          absl::StrCat("has unknown block '", std::string(1, ch),
                                       "' (known: M * - E)"));
      }
    }
    REFIT_ASSIGN_OR_RETURN(c.mamba_num_heads,
                           GetInt(j, "mamba_num_heads", true));
    REFIT_ASSIGN_OR_RETURN(c.mamba_head_dim, GetInt(j, "mamba_head_dim", true));
    REFIT_ASSIGN_OR_RETURN(c.ssm_state_size, GetInt(j, "ssm_state_size", true));
    REFIT_ASSIGN_OR_RETURN(c.n_groups, GetInt(j, "n_groups", true));
    REFIT_ASSIGN_OR_RETURN(c.conv_kernel, GetInt(j, "conv_kernel", true));
    REFIT_ASSIGN_OR_RETURN(c.use_conv_bias, GetBool(j, "use_conv_bias", true));
    c.router_bias = c.num_experts > 0;
  }
  auto q = j.find("quantization_config");
  if (q != j.end() && q->is_object()) {
    auto bs = q->find("weight_block_size");
    if (bs != q->end() && !bs->is_null()) {
      if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
          (*bs)[0] != (*bs)[1]) {
        return FieldError("quantization_config.weight_block_size",
                          "must be [n, n] (square blocks)");
      }
      c.fp8_block = (*bs)[0].get<int64_t>();
      if (c.fp8_block != 0) c.quant = QuantFormat::kFp8Block;
    }
    auto qm = q->find("quant_method");
    if (c.fp8_block == 0 && qm != q->end() && qm->is_string() &&
        qm->get<std::string>() == "fp8") {
      c.quant = QuantFormat::kFp8Tensor;
    }
    auto kv = q->find("kv_cache_scheme");
    c.kv_cache_scales = kv != q->end() && !kv->is_null();
  }
  REFIT_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::Status SetWeightDType(ModelConfig* c, absl::string_view dtype) {
  if (dtype == "bf16") {
    c->quant.reset();
    c->fp8_block = 0;
  } else if (dtype == "fp8") {
    if (!c->quant.has_value()) {
      c->quant = QuantFormat::kFp8Block;
      c->fp8_block = 128;
    }
  } else if (dtype == "fp8-tensor") {
    c->quant = QuantFormat::kFp8Tensor;
    c->fp8_block = 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight dtype \"", dtype, "\" is not one of bf16, fp8, fp8-tensor"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadModelConfigFile(const std::string& path) {
  return AnnotateStatus(ReadFileToString(path, kMaxModelConfigBytes),
                        "model config file");
}

absl::StatusOr<ModelConfig> LoadModelConfigFile(const std::string& path) {
  REFIT_ASSIGN_OR_RETURN(std::string text, ReadModelConfigFile(path));
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
  if (!c.ok()) return AnnotateStatus(c.status(), path);
  return c;
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> out;
  for (int i = 0; i < internal_mapping::kNumBuiltinConfigs; ++i) {
    out.push_back(internal_mapping::kBuiltinConfigs[i].name);
  }
  return out;
}

absl::StatusOr<std::string> BuiltinModelJson(absl::string_view name) {
  for (int i = 0; i < internal_mapping::kNumBuiltinConfigs; ++i) {
    if (name == internal_mapping::kBuiltinConfigs[i].name) {
      return std::string(internal_mapping::kBuiltinConfigs[i].json);
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no built-in model \"", name, "\" (known: ",
                   absl::StrJoin(BuiltinModelNames(), ", "), ")"));
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& name_or_path) {
  absl::StatusOr<std::string> text = BuiltinModelJson(name_or_path);
  if (text.ok()) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(*text);
    if (!c.ok()) return AnnotateStatus(c.status(), name_or_path);
    return c;
  }
  REFIT_ASSIGN_OR_RETURN(std::string path, NonBuiltinModelConfigPath(name_or_path));
  return LoadModelConfigFile(path);
}

absl::StatusOr<std::string> NonBuiltinModelConfigPath(const std::string& model) {
  absl::StatusOr<std::string> path = ModelConfigPath(model);
  if (path.ok() || LooksLikePath(model) || absl::StrContains(model, "/")) return path;
  // A plain name: most likely a misspelt built-in one.
  return absl::NotFoundError(absl::StrCat(
      "no built-in model \"", model, "\" (known: ", absl::StrJoin(BuiltinModelNames(), ", "),
      "); --model also takes a config.json path, a checkpoint directory or a Hugging Face "
      "id in the local cache (", path.status().message(), ")"));
}

}  // namespace refit
