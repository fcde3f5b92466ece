#include "mapping/model_family.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "layout/quant_format.h"

namespace refit {
namespace {

// Symbolic dimensions, resolved from the config.
enum class Sym {
  kH,       // hidden
  kV,       // vocab
  kQ,       // heads * head_dim
  kKV,      // kv_heads * head_dim
  kHd,      // head_dim
  kI,       // intermediate
  kE,       // routed experts
  kIm,      // moe intermediate
  kIs,      // shared experts intermediate (fused)
  kQLora,   // q_lora_rank
  kKVLora,  // kv_lora_rank
  kKVA,     // kv_lora_rank + qk_rope_head_dim
  kQB,      // heads * (nope + rope)
  kKVB,     // heads * (nope + v)
  kOIn,     // heads * v
  kMIn,     // mamba in_proj rows
  kMConv,   // mamba conv dim
  kOne,
  kConvK,
  kMHeads,
  kMInter,
};

enum class Cond {
  kAlways,
  kBias,       // attention_bias
  kQkNorm,     // qk_norm
  kKvScales,   // kv_cache_scales
  kQLora,      // q_lora_rank > 0
  kNoQLora,    // q_lora_rank == 0
  kShared,     // num_shared_experts > 0
  kRouterBias, // router_bias
  kConvBias,   // use_conv_bias
};

enum class Kind {
  kPlain,      // bf16
  kLinear,     // fp8 + scale when the model is fp8
  kF32,        // always f32
};

struct ParamDef {
  Role role;
  const char* suffix;  // after the layer prefix ("{}" = expert index)
  int rank;
  Sym dims[3];
  Kind kind;
  Cond cond;
  bool stacked;
};

constexpr ParamDef kLlamaAttn[] = {
    {Role::kInputNorm, "input_layernorm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kQ, "self_attn.q_proj.weight", 2, {Sym::kQ, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kK, "self_attn.k_proj.weight", 2, {Sym::kKV, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kV, "self_attn.v_proj.weight", 2, {Sym::kKV, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kQBias, "self_attn.q_proj.bias", 1, {Sym::kQ}, Kind::kPlain, Cond::kBias, false},
    {Role::kKBias, "self_attn.k_proj.bias", 1, {Sym::kKV}, Kind::kPlain, Cond::kBias, false},
    {Role::kVBias, "self_attn.v_proj.bias", 1, {Sym::kKV}, Kind::kPlain, Cond::kBias, false},
    {Role::kQNorm, "self_attn.q_norm.weight", 1, {Sym::kHd}, Kind::kPlain, Cond::kQkNorm, false},
    {Role::kKNorm, "self_attn.k_norm.weight", 1, {Sym::kHd}, Kind::kPlain, Cond::kQkNorm, false},
    {Role::kO, "self_attn.o_proj.weight", 2, {Sym::kH, Sym::kQ}, Kind::kLinear, Cond::kAlways, false},
    {Role::kKScale, "self_attn.k_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kVScale, "self_attn.v_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kQScale, "self_attn.q_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
};

constexpr ParamDef kMlaAttn[] = {
    {Role::kInputNorm, "input_layernorm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMlaQA, "self_attn.q_a_proj.weight", 2, {Sym::kQLora, Sym::kH}, Kind::kLinear, Cond::kQLora, false},
    {Role::kMlaQANorm, "self_attn.q_a_layernorm.weight", 1, {Sym::kQLora}, Kind::kPlain, Cond::kQLora, false},
    {Role::kMlaQB, "self_attn.q_b_proj.weight", 2, {Sym::kQB, Sym::kQLora}, Kind::kLinear, Cond::kQLora, false},
    {Role::kMlaQ, "self_attn.q_proj.weight", 2, {Sym::kQB, Sym::kH}, Kind::kLinear, Cond::kNoQLora, false},
    {Role::kMlaKVA, "self_attn.kv_a_proj_with_mqa.weight", 2, {Sym::kKVA, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kMlaKVANorm, "self_attn.kv_a_layernorm.weight", 1, {Sym::kKVLora}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMlaKVB, "self_attn.kv_b_proj.weight", 2, {Sym::kKVB, Sym::kKVLora}, Kind::kLinear, Cond::kAlways, false},
    {Role::kO, "self_attn.o_proj.weight", 2, {Sym::kH, Sym::kOIn}, Kind::kLinear, Cond::kAlways, false},
    {Role::kKScale, "self_attn.k_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kVScale, "self_attn.v_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kQScale, "self_attn.q_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
};

constexpr ParamDef kLlamaMlp[] = {
    {Role::kPostAttnNorm, "post_attention_layernorm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kGate, "mlp.gate_proj.weight", 2, {Sym::kI, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kUp, "mlp.up_proj.weight", 2, {Sym::kI, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kDown, "mlp.down_proj.weight", 2, {Sym::kH, Sym::kI}, Kind::kLinear, Cond::kAlways, false},
};

// Qwen3-MoE and DeepSeek-V3 MoE blocks.
constexpr ParamDef kGatedMoe[] = {
    {Role::kPostAttnNorm, "post_attention_layernorm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kRouter, "mlp.gate.weight", 2, {Sym::kE, Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kRouterBias, "mlp.gate.e_score_correction_bias", 1, {Sym::kE}, Kind::kF32, Cond::kRouterBias, false},
    {Role::kExpertGate, "mlp.experts.{}.gate_proj.weight", 3, {Sym::kE, Sym::kIm, Sym::kH}, Kind::kLinear, Cond::kAlways, true},
    {Role::kExpertUp, "mlp.experts.{}.up_proj.weight", 3, {Sym::kE, Sym::kIm, Sym::kH}, Kind::kLinear, Cond::kAlways, true},
    {Role::kExpertDown, "mlp.experts.{}.down_proj.weight", 3, {Sym::kE, Sym::kH, Sym::kIm}, Kind::kLinear, Cond::kAlways, true},
    {Role::kSharedGate, "mlp.shared_experts.gate_proj.weight", 2, {Sym::kIs, Sym::kH}, Kind::kLinear, Cond::kShared, false},
    {Role::kSharedUp, "mlp.shared_experts.up_proj.weight", 2, {Sym::kIs, Sym::kH}, Kind::kLinear, Cond::kShared, false},
    {Role::kSharedDown, "mlp.shared_experts.down_proj.weight", 2, {Sym::kH, Sym::kIs}, Kind::kLinear, Cond::kShared, false},
};

constexpr ParamDef kNemotronMamba[] = {
    {Role::kBlockNorm, "norm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaInProj, "mixer.in_proj.weight", 2, {Sym::kMIn, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kMambaConvW, "mixer.conv1d.weight", 3, {Sym::kMConv, Sym::kOne, Sym::kConvK}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaConvB, "mixer.conv1d.bias", 1, {Sym::kMConv}, Kind::kPlain, Cond::kConvBias, false},
    {Role::kMambaDtBias, "mixer.dt_bias", 1, {Sym::kMHeads}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaALog, "mixer.A_log", 1, {Sym::kMHeads}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaD, "mixer.D", 1, {Sym::kMHeads}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaNorm, "mixer.norm.weight", 1, {Sym::kMInter}, Kind::kPlain, Cond::kAlways, false},
    {Role::kMambaOutProj, "mixer.out_proj.weight", 2, {Sym::kH, Sym::kMInter}, Kind::kLinear, Cond::kAlways, false},
};

constexpr ParamDef kNemotronAttn[] = {
    {Role::kBlockNorm, "norm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kQ, "mixer.q_proj.weight", 2, {Sym::kQ, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kK, "mixer.k_proj.weight", 2, {Sym::kKV, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kV, "mixer.v_proj.weight", 2, {Sym::kKV, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kO, "mixer.o_proj.weight", 2, {Sym::kH, Sym::kQ}, Kind::kLinear, Cond::kAlways, false},
    {Role::kKScale, "mixer.k_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kVScale, "mixer.v_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
    {Role::kQScale, "mixer.q_scale", 0, {}, Kind::kF32, Cond::kKvScales, false},
};

// Non-gated (ReLU^2) MLP.
constexpr ParamDef kNemotronMlp[] = {
    {Role::kBlockNorm, "norm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kUp, "mixer.up_proj.weight", 2, {Sym::kI, Sym::kH}, Kind::kLinear, Cond::kAlways, false},
    {Role::kDown, "mixer.down_proj.weight", 2, {Sym::kH, Sym::kI}, Kind::kLinear, Cond::kAlways, false},
};

// Non-gated MoE: experts have up/down only.
constexpr ParamDef kNemotronMoe[] = {
    {Role::kBlockNorm, "norm.weight", 1, {Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kRouter, "mixer.gate.weight", 2, {Sym::kE, Sym::kH}, Kind::kPlain, Cond::kAlways, false},
    {Role::kRouterBias, "mixer.gate.e_score_correction_bias", 1, {Sym::kE}, Kind::kF32, Cond::kRouterBias, false},
    {Role::kExpertUp, "mixer.experts.{}.up_proj.weight", 3, {Sym::kE, Sym::kIm, Sym::kH}, Kind::kLinear, Cond::kAlways, true},
    {Role::kExpertDown, "mixer.experts.{}.down_proj.weight", 3, {Sym::kE, Sym::kH, Sym::kIm}, Kind::kLinear, Cond::kAlways, true},
    {Role::kSharedUp, "mixer.shared_experts.up_proj.weight", 2, {Sym::kIs, Sym::kH}, Kind::kLinear, Cond::kShared, false},
    {Role::kSharedDown, "mixer.shared_experts.down_proj.weight", 2, {Sym::kH, Sym::kIs}, Kind::kLinear, Cond::kShared, false},
};

struct Table {
  const ParamDef* defs;
  int size;
};
template <int N>
constexpr Table T(const ParamDef (&d)[N]) {
  return {d, N};
}

// The global tensors of each naming scheme.
struct GlobalNames {
  const char* layer_prefix;  // "{L}" = layer index
  const char* embed;
  const char* final_norm;
};
constexpr GlobalNames kHfNames = {"model.layers.", "model.embed_tokens.weight",
                                  "model.norm.weight"};
constexpr GlobalNames kNemotronNames = {"backbone.layers.",
                                        "backbone.embeddings.weight",
                                        "backbone.norm_f.weight"};

int64_t Resolve(const ModelConfig& c, Sym s) {
  switch (s) {
    case Sym::kH: return c.hidden_size;
    case Sym::kV: return c.vocab_size;
    case Sym::kQ: return c.num_heads * c.head_dim;
    case Sym::kKV: return c.num_kv_heads * c.head_dim;
    case Sym::kHd: return c.head_dim;
    case Sym::kI: return c.intermediate_size;
    case Sym::kE: return c.num_experts;
    case Sym::kIm: return c.moe_intermediate_size;
    case Sym::kIs: return c.shared_intermediate_size;
    case Sym::kQLora: return c.q_lora_rank;
    case Sym::kKVLora: return c.kv_lora_rank;
    case Sym::kKVA: return c.kv_lora_rank + c.qk_rope_head_dim;
    case Sym::kQB: return c.num_heads * c.qk_head_dim();
    case Sym::kKVB: return c.num_heads * (c.qk_nope_head_dim + c.v_head_dim);
    case Sym::kOIn: return c.num_heads * c.v_head_dim;
    case Sym::kMIn: return c.mamba_in_proj_dim();
    case Sym::kMConv: return c.mamba_conv_dim();
    case Sym::kOne: return 1;
    case Sym::kConvK: return c.conv_kernel;
    case Sym::kMHeads: return c.mamba_num_heads;
    case Sym::kMInter: return c.mamba_intermediate();
  }
  return 0;
}

bool Holds(const ModelConfig& c, Cond cond) {
  switch (cond) {
    case Cond::kAlways: return true;
    case Cond::kBias: return c.attention_bias;
    case Cond::kQkNorm: return c.qk_norm;
    case Cond::kKvScales: return c.kv_cache_scales;
    case Cond::kQLora: return c.q_lora_rank > 0;
    case Cond::kNoQLora: return c.q_lora_rank == 0;
    case Cond::kShared: return c.num_shared_experts > 0;
    case Cond::kRouterBias: return c.router_bias;
    case Cond::kConvBias: return c.use_conv_bias;
  }
  return false;
}

struct LayerPlan {
  LayerKind kind;
  std::vector<Table> tables;
};

LayerPlan PlanLayer(const ModelConfig& c, int64_t layer) {
  switch (c.family) {
    case ModelFamily::kDense:
      return {{Mixer::kGqa, Ffn::kGated}, {T(kLlamaAttn), T(kLlamaMlp)}};
    case ModelFamily::kQwen3Moe:
      return {{Mixer::kGqa, Ffn::kMoeGated}, {T(kLlamaAttn), T(kGatedMoe)}};
    case ModelFamily::kDeepseekV3:
      if (layer < c.first_k_dense) {
        return {{Mixer::kMla, Ffn::kGated}, {T(kMlaAttn), T(kLlamaMlp)}};
      }
      return {{Mixer::kMla, Ffn::kMoeGated}, {T(kMlaAttn), T(kGatedMoe)}};
    case ModelFamily::kNemotronH:
      switch (c.hybrid_pattern[layer]) {
        case HybridBlock::kMamba:
          return {{Mixer::kMamba, Ffn::kNone}, {T(kNemotronMamba)}};
        case HybridBlock::kAttention:
          return {{Mixer::kGqa, Ffn::kNone}, {T(kNemotronAttn)}};
        case HybridBlock::kMlp:
          return {{Mixer::kNone, Ffn::kNonGated}, {T(kNemotronMlp)}};
        case HybridBlock::kMoe:
          return {{Mixer::kNone, Ffn::kMoeNonGated}, {T(kNemotronMoe)}};
      }
  }
  return {};
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::string_view RoleName(Role r) {
  static constexpr const char* kNames[] = {
      "embed", "final_norm", "lm_head", "input_norm", "post_attn_norm",
      "block_norm", "q", "k", "v", "q_bias", "k_bias", "v_bias", "q_norm",
      "k_norm", "o", "k_scale", "v_scale", "q_scale", "mla_q_a",
      "mla_q_a_norm", "mla_q_b", "mla_q", "mla_kv_a", "mla_kv_a_norm",
      "mla_kv_b", "gate", "up", "down", "router", "router_bias",
      "expert_gate", "expert_up", "expert_down", "shared_gate", "shared_up",
      "shared_down", "mamba_in_proj", "mamba_conv_weight", "mamba_conv_bias",
      "mamba_a_log", "mamba_d", "mamba_dt_bias", "mamba_norm",
      "mamba_out_proj"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) ==
                    static_cast<size_t>(Role::kNumRoles),
                "role names");
  int i = static_cast<int>(r);
  if (i < 0 || i >= static_cast<int>(Role::kNumRoles)) return "unknown";
  return kNames[i];
}

std::string PerTensorScaleName(absl::string_view weight_name) {
  std::string s(weight_name);
  size_t pos = s.rfind("weight");
  if (pos == std::string::npos) return s + "_scale";
  s.insert(pos + 6, "_scale");
  return s;
}

std::string GlobalScaleName(absl::string_view weight_name) {
  std::string s(weight_name);
  size_t pos = s.rfind("weight");
  if (pos == std::string::npos) return s + "_scale_2";
  s.insert(pos + 6, "_scale_2");
  return s;
}

std::string GlobalScaleBufferName(absl::string_view weight_buffer_name) {
  std::string s(weight_buffer_name);
  const size_t pos = s.rfind("weight");
  if (pos == std::string::npos) return s + "_global_scale";
  const size_t dot = s.rfind('.', pos);
  const absl::string_view last =
      absl::string_view(s).substr(dot == std::string::npos ? 0 : dot + 1);
  const bool moe = last.size() > 1 && last[0] == 'w' && last[1] >= '0' && last[1] <= '9';
  s.insert(pos + 6, moe ? "_scale_2" : "_global_scale");
  return s;
}

std::string ScaleName(absl::string_view weight_name) {
  std::string s(weight_name);
  size_t pos = s.rfind("weight");
  if (pos == std::string::npos) return s + "_scale_inv";
  s.insert(pos + 6, "_scale_inv");
  return s;
}

namespace {

// The NVFP4 global scale tensors of one layer: one per engine parameter,
// on its first part (a follower whose leader is in the layer shares it).
void AddNvfp4GlobalScales(const ModelTensors::RoleIndex& ix, ModelTensors* m) {
  static constexpr std::pair<Role, Role> kFollows[] = {
      {Role::kK, Role::kQ},          {Role::kV, Role::kQ},
      {Role::kUp, Role::kGate},      {Role::kExpertUp, Role::kExpertGate},
      {Role::kSharedUp, Role::kSharedGate}, {Role::kMlaKVA, Role::kMlaQA},
  };
  for (int role = 0; role < ModelTensors::kNumRoles; ++role) {
    const int32_t w = ix[role];
    if (w < 0 || m->scale_of[w] < 0) continue;
    bool follower = false;
    for (const auto& [f, lead] : kFollows) {
      if (static_cast<int>(f) == role && ix[static_cast<int>(lead)] >= 0) follower = true;
    }
    if (follower) continue;
    const TensorSpec& t = m->tensors[w];
    TensorSpec g;
    g.name = GlobalScaleName(t.name);
    if (t.stacked) g.shape = {t.shape[0]};
    g.dtype = DType::kF32;
    g.stacked = t.stacked;
    g.format = QuantFormat::kNvfp4;
    g.quant_role = QuantRole::kGlobalScale;
    m->tensors.push_back(std::move(g));
    m->scale_of.push_back(-1);
    m->is_scale.push_back(false);
    m->global_of.push_back(-1);
    m->global_group.push_back(-1);
    const int32_t gi = static_cast<int32_t>(m->tensors.size() - 1);
    m->global_of[w] = gi;
    m->global_group[w] = gi;
    for (const auto& [f, lead] : kFollows) {
      const int32_t ft = ix[static_cast<int>(f)];
      if (static_cast<int>(lead) == role && ft >= 0) m->global_group[ft] = gi;
    }
  }
}

// The engine weight `*t` (a model-dtype spec on entry) stored as `row`
// says, and its scale tensor `*scale`: codes of the row's dtype (packed
// codes_per_byte a byte), one scale of the row's dtype per block (FP8 blocks
// of fp8_block x fp8_block; one per tensor, per expert when stacked, for
// per-tensor FP8). INVALID_ARGUMENT naming the weight when its rank or last
// dim does not fit the block.
absl::Status QuantizedWeightSpecs(const QuantFormatRow& row, int64_t fp8_block, TensorSpec* t,
                                  TensorSpec* scale) {
  t->dtype = row.code_dtype;
  t->format = row.format;
  t->quant_role = QuantRole::kCodes;
  scale->dtype = row.scale_dtype;
  scale->format = row.format;
  scale->quant_role = QuantRole::kScales;
  scale->stacked = t->stacked;
  if (row.block_cols == 0) {  // one scale per tensor
    scale->name = PerTensorScaleName(t->name);
    if (t->stacked) scale->shape = {t->shape[0]};
    return absl::OkStatus();
  }
  const bool fixed = row.block_rows == 1;
  const std::string kind = absl::AsciiStrToUpper(row.name);
  if (t->shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " weight ", t->name, " has rank < 2"));
  }
  if (fixed && t->shape.back() % row.block_cols != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " weight ", t->name,
                                                   ": the last dim must be a multiple of ",
                                                   row.block_cols));
  }
  scale->name = fixed ? PerTensorScaleName(t->name) : ScaleName(t->name);
  scale->shape = t->shape;
  const size_t r = scale->shape.size();
  if (fixed) {
    scale->shape[r - 1] /= row.block_cols;
  } else {
    scale->shape[r - 2] = CeilDiv(scale->shape[r - 2], fp8_block);
    scale->shape[r - 1] = CeilDiv(scale->shape[r - 1], fp8_block);
  }
  t->shape.back() /= row.codes_per_byte;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelTensors> BuildModelTensors(const ModelConfig& c) {
  REFIT_RETURN_IF_ERROR(ValidateModelConfig(c));
  ModelTensors m;
  m.quant = c.quant;
  m.fp8_block = c.fp8_block;
  m.global.fill(-1);
  const GlobalNames& names =
      c.family == ModelFamily::kNemotronH ? kNemotronNames : kHfNames;

  auto add = [&](TensorSpec t) {
    m.tensors.push_back(std::move(t));
    m.scale_of.push_back(-1);
    m.is_scale.push_back(false);
    m.global_of.push_back(-1);
    m.global_group.push_back(-1);
    return static_cast<int32_t>(m.tensors.size() - 1);
  };
  auto add_weight = [&](TensorSpec t, bool linear) -> absl::StatusOr<int32_t> {
    const bool fp8 = linear && c.quant.has_value() && !(c.quant_experts_only && !t.stacked);
    TensorSpec scale;
    if (fp8) {
      REFIT_RETURN_IF_ERROR(
          QuantizedWeightSpecs(QuantFormatTraits(*c.quant), c.fp8_block, &t, &scale));
    }
    int32_t w = add(std::move(t));
    if (fp8) {
      int32_t s = add(std::move(scale));
      m.scale_of[w] = s;
      m.is_scale[s] = true;
    }
    return w;
  };

  m.global[static_cast<int>(Role::kEmbed)] =
      add({names.embed, {c.vocab_size, c.hidden_size}, DType::kBF16, false});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerPlan plan = PlanLayer(c, l);
    m.layer_kinds.push_back(plan.kind);
    ModelTensors::RoleIndex ix;
    ix.fill(-1);
    std::string prefix = absl::StrCat(names.layer_prefix, l, ".");
    for (const Table& table : plan.tables) {
      for (int k = 0; k < table.size; ++k) {
        const ParamDef& d = table.defs[k];
        if (!Holds(c, d.cond)) continue;
        TensorSpec t;
        t.name = prefix + d.suffix;
        for (int i = 0; i < d.rank; ++i) t.shape.push_back(Resolve(c, d.dims[i]));
        t.dtype = d.kind == Kind::kF32 ? DType::kF32 : DType::kBF16;
        t.stacked = d.stacked;
        REFIT_ASSIGN_OR_RETURN(int32_t idx,
                               add_weight(std::move(t), d.kind == Kind::kLinear));
        ix[static_cast<int>(d.role)] = idx;
      }
    }
    if (m.quant == QuantFormat::kNvfp4) AddNvfp4GlobalScales(ix, &m);
    m.layers.push_back(ix);
  }
  m.global[static_cast<int>(Role::kFinalNorm)] =
      add({names.final_norm, {c.hidden_size}, DType::kBF16, false});
  if (!c.tie_word_embeddings) {
    m.global[static_cast<int>(Role::kLmHead)] =
        add({"lm_head.weight", {c.vocab_size, c.hidden_size}, DType::kBF16,
             false});
  }
  for (const TensorSpec& t : m.tensors) {
    REFIT_RETURN_IF_ERROR(ValidateTensorSpec(t));
  }
  return m;
}

}  // namespace refit
