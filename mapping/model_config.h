// ModelConfig: the model dimensions refit needs, read from an HF config.json.
//
// Only dimensions are read (no weights). The family decides which logical
// tensors exist (model_family.h); the conventions (trainer_*.h,
// engine_vllm.h) decide where they live.
//
// Built-in models (the real public configs, embedded in the binary so that
// no data file is needed at run time): see BuiltinModelNames().
#ifndef REFIT_MAPPING_MODEL_CONFIG_H_
#define REFIT_MAPPING_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "layout/quant_format.h"

namespace refit {

enum class ModelFamily {
  kDense,       // llama, mistral, qwen2, qwen3: GQA attention + SwiGLU MLP
  kQwen3Moe,    // qwen3_moe: GQA (+ q/k norm) + gated MoE, router mlp.gate
  kDeepseekV3,  // deepseek_v3, kimi_k2: MLA, first k dense, routed + shared
  kNemotronH,   // nemotron_h: hybrid Mamba2 / attention / MLP / MoE blocks
};

// "dense", "qwen3_moe", "deepseek_v3", "nemotron_h".
absl::string_view ModelFamilyName(ModelFamily f);

// One NemotronH block (one character of hybrid_override_pattern).
enum class HybridBlock { kMamba, kAttention, kMlp, kMoe };

struct ModelConfig {
  std::string model_type;  // as in config.json
  ModelFamily family = ModelFamily::kDense;

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;

  // Attention (GQA): q has num_heads * head_dim rows, k and v
  // num_kv_heads * head_dim.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qk_norm = false;         // qwen3: q_norm / k_norm [head_dim]
  bool attention_bias = false;  // qwen2: q/k/v biases

  // Dense MLP.
  int64_t intermediate_size = 0;

  // MoE (0 experts = no MoE).
  int64_t num_experts = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  int64_t shared_intermediate_size = 0;  // total (all shared experts fused)
  int64_t first_k_dense = 0;             // deepseek: first_k_dense_replace
  bool router_bias = false;  // gate.e_score_correction_bias (fp32)
  // deepseek: n_group, the expert groups of grouped top-k routing (absent:
  // transformers' DeepseekV3Config default, 8); 1 for other families. vLLM
  // places experts round-robin only for models with more than one.
  int64_t num_expert_groups = 1;

  // MLA (deepseek_v3). q_lora_rank 0 = q_proj without low rank.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // NemotronH: one block per layer, and Mamba2 mixer dimensions.
  std::vector<HybridBlock> hybrid_pattern;
  int64_t mamba_num_heads = 0;
  int64_t mamba_head_dim = 0;
  int64_t ssm_state_size = 0;
  int64_t n_groups = 0;
  int64_t conv_kernel = 0;
  bool use_conv_bias = false;

  // The format of the quantizable linear weights (layout/quant_format.h);
  // nullopt: the model dtype. From the checkpoint: kFp8Block (e4m3 weights,
  // each with an f32 "<...>.weight_scale_inv" per fp8_block x fp8_block
  // tile, quantization_config.weight_block_size) or kFp8Tensor
  // (quant_method "fp8" without weight_block_size: e4m3 weights, each with
  // an f32 scalar "<...>.weight_scale", per-expert scales stacked to [E]).
  // An engine's quant= (and a trainer's weights=) set the others: kMxfp8
  // (e4m3 weights, a u8 E8M0 "<...>.weight_scale" per 1 x 32 block of the
  // last dim), kNvfp4 (u8 weights [..., N, K/2], two E2M1 codes a byte,
  // with an f8e4m3 "<...>.weight_scale" [..., N, K/16] and, on the first
  // part of each engine parameter, an f32 "<...>.weight_scale_2" ([E] for
  // stacked experts) shared by the parameter's fused parts), and the FP8
  // block formats' UE8M0 forms (kFp8BlockUe8m0, kFp8BlockRequantUe8m0).
  std::optional<QuantFormat> quant;
  // The FP8 block formats' tile edge (weight_block_size); 0 for the others.
  int64_t fp8_block = 0;
  // With quant: only the routed experts (stacked tensors) are quantized,
  // the other linear weights keep the model dtype (vLLM's online NVFP4,
  // EngineSpec::Recipe::kVllm).
  bool quant_experts_only = false;
  // KV-cache scales (k_scale, v_scale, q_scale per attention layer), from
  // quantization_config.kv_cache_scheme.
  bool kv_cache_scales = false;

  // Derived sizes.
  int64_t mamba_intermediate() const { return mamba_num_heads * mamba_head_dim; }
  int64_t mamba_conv_dim() const {
    return mamba_intermediate() + 2 * n_groups * ssm_state_size;
  }
  int64_t mamba_in_proj_dim() const {
    return 2 * mamba_intermediate() + 2 * n_groups * ssm_state_size +
           mamba_num_heads;
  }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Parses the text of an HF config.json. Fails with INVALID_ARGUMENT naming
// the missing or invalid field (or the unknown model_type / JSON error).
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);

// The most bytes a config.json file may hold (real ones hold a few KiB).
inline constexpr int64_t kMaxModelConfigBytes = int64_t{16} << 20;

// The text of the config.json file at `path`. NOT_FOUND if it does not
// exist; INVALID_ARGUMENT naming the path if it is not a regular file (a
// directory, /dev/zero, a pipe) or holds more than kMaxModelConfigBytes;
// PERMISSION_DENIED if it may not be read (see common/file.h).
absl::StatusOr<std::string> ReadModelConfigFile(const std::string& path);

// Reads (ReadModelConfigFile, with its errors) and parses (ParseModelConfig,
// its errors prefixed with the path) a config.json file.
absl::StatusOr<ModelConfig> LoadModelConfigFile(const std::string& path);

// The names of the built-in models: "qwen3-8b", "qwen3-30b-a3b",
// "llama-3.1-70b", "deepseek-v3", "kimi-k2", "nemotron-h-8b", and the tiny
// test configs "tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe",
// "tiny-qwen3-moe-fp8" (per-tensor FP8), "tiny-deepseek-v3",
// "tiny-deepseek-v3-fp8" (128x128 blocks), "tiny-nemotron-h", and BF16
// models whose dims take 128x128 FP8 blocks under engine TP 2
// ("tiny-qwen3-moe-b128", "tiny-deepseek-v3-b128"). Sorted.
// Real configs list dimensions only; DeepSeek-V3's MTP layer
// (num_nextn_predict_layers) is not part of the model refit moves.
std::vector<std::string> BuiltinModelNames();

// The config.json text of a built-in model; NOT_FOUND listing the known
// names otherwise.
absl::StatusOr<std::string> BuiltinModelJson(absl::string_view name);

// A built-in name, or else what ModelConfigPath (mapping/model_source.h)
// finds: a config.json path, a directory holding one, or a Hugging Face id
// in the local cache (LoadModelConfigFile). NOT_FOUND saying "no such file"
// for a path, naming the cache for an id, listing the built-in names for a
// name that is neither.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& name_or_path);

// The config.json path of a model that is not built in (ModelConfigPath),
// with LoadModelConfig's errors: what a client registers the text of.
absl::StatusOr<std::string> NonBuiltinModelConfigPath(const std::string& model);

// Overrides the weight format (the CLI's --dtype): "bf16" drops FP8;
// "fp8" keeps the config's FP8 scheme, or else selects 128x128 blocks
// (e4m3 + weight_scale_inv); "fp8-tensor" selects per-tensor scales.
// INVALID_ARGUMENT naming an unknown dtype.
absl::Status SetWeightDType(ModelConfig* config, absl::string_view dtype);

// Checks the dimensions are consistent (positive where required, pattern
// length == layers, fp8_block > 0 exactly for the FP8 block formats, ...).
// INVALID_ARGUMENT naming the field.
absl::Status ValidateModelConfig(const ModelConfig& c);

}  // namespace refit

#endif  // REFIT_MAPPING_MODEL_CONFIG_H_
