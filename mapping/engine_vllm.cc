#include "mapping/engine_vllm.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/conventions.h"

namespace refit {
namespace {

using L = LayerMatch;

// Names: "from>to" substitutes the last occurrence of `from` in the HF name.
constexpr RuleRow kVllmRules[] = {
    {Role::kEmbed, L::kAny, "", Rule::kVocab, 0},
    {Role::kLmHead, L::kAny, "", Rule::kVocab, 0},
    {Role::kFinalNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kInputNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kPostAttnNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kBlockNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kQ, L::kAny, "q_proj.>qkv_proj.", Rule::kQkvReplicated, 0},
    {Role::kK, L::kAny, "k_proj.>qkv_proj.", Rule::kQkvReplicated, 1},
    {Role::kV, L::kAny, "v_proj.>qkv_proj.", Rule::kQkvReplicated, 2},
    {Role::kQBias, L::kAny, "q_proj.>qkv_proj.", Rule::kQkvReplicated, 0},
    {Role::kKBias, L::kAny, "k_proj.>qkv_proj.", Rule::kQkvReplicated, 1},
    {Role::kVBias, L::kAny, "v_proj.>qkv_proj.", Rule::kQkvReplicated, 2},
    {Role::kQNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kKNorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kO, L::kAny, "", Rule::kRow, 0},
    {Role::kKScale, L::kAny, ".k_scale>.attn.k_scale", Rule::kReplicate, 0},
    {Role::kVScale, L::kAny, ".v_scale>.attn.v_scale", Rule::kReplicate, 0},
    {Role::kQScale, L::kAny, ".q_scale>.attn.q_scale", Rule::kReplicate, 0},
    {Role::kMlaQA, L::kAny, "q_a_proj.>fused_qkv_a_proj.", Rule::kConcat, 0},
    {Role::kMlaQANorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kMlaQB, L::kAny, "", Rule::kColumn, 0},
    {Role::kMlaQ, L::kAny, "", Rule::kColumn, 0},
    {Role::kMlaKVA, L::kAny, "kv_a_proj_with_mqa.>fused_qkv_a_proj.", Rule::kConcat, 1},
    {Role::kMlaKVANorm, L::kAny, "", Rule::kReplicate, 0},
    {Role::kMlaKVB, L::kAny, "", Rule::kColumn, 0},
    {Role::kGate, L::kAny, "gate_proj.>gate_up_proj.", Rule::kGlu, 0},
    {Role::kUp, L::kGated, "up_proj.>gate_up_proj.", Rule::kGlu, 1},
    {Role::kUp, L::kAny, "", Rule::kColumn, 0},
    {Role::kDown, L::kAny, "", Rule::kRow, 0},
    {Role::kRouter, L::kAny, "", Rule::kReplicate, 0},
    {Role::kRouterBias, L::kAny, "", Rule::kReplicate, 0},
    {Role::kExpertGate, L::kAny, "{}.gate_proj.weight>w13_weight", Rule::kExpert, 0},
    {Role::kExpertUp, L::kAny, "{}.up_proj.weight>w13_weight", Rule::kExpert, 1},
    {Role::kExpertDown, L::kAny, "{}.down_proj.weight>w2_weight", Rule::kExpert, 2},
    {Role::kSharedGate, L::kAny, "gate_proj.>gate_up_proj.", Rule::kGlu, 0},
    {Role::kSharedUp, L::kMoeGated, "up_proj.>gate_up_proj.", Rule::kGlu, 1},
    {Role::kSharedUp, L::kAny, "", Rule::kColumn, 0},
    {Role::kSharedDown, L::kAny, "", Rule::kRow, 0},
    {Role::kMambaInProj, L::kAny, "", Rule::kMambaInProj, 0},
    {Role::kMambaConvW, L::kAny, "", Rule::kMambaConv, 0},
    {Role::kMambaConvB, L::kAny, "", Rule::kMambaConv, 0},
    {Role::kMambaALog, L::kAny, "A_log>A", Rule::kColumn, 0},
    {Role::kMambaD, L::kAny, "", Rule::kColumn, 0},
    {Role::kMambaDtBias, L::kAny, "", Rule::kColumn, 0},
    {Role::kMambaNorm, L::kAny, "", Rule::kColumn, 0},
    {Role::kMambaOutProj, L::kAny, "", Rule::kRow, 0},
};

// kernel=flashinfer: rows that replace kVllmRules' for the same role and
// layer kind. FlashInfer's CUTLASS fused MoE applies the activation to the
// other half of w13, so vLLM stores it as [w3; w1] (up before gate), block
// scales alike: swap_w13_to_w31 in prepare_fp8_moe_layer_for_fi,
// vllm/model_executor/layers/quantization/utils/flashinfer_utils.py at
// 487151d (and fp8.py's process_weights_after_loading at 1436674). The part
// is the slot in the fused buffer: up first. vLLM main then clamps the
// experts' block scales to at least 1e-10; refit's scales are at least
// 1e-4 / 448 (exec/convert/quantize.h), so the clamp leaves them as they are.
constexpr RuleRow kFlashinferRules[] = {
    {Role::kExpertGate, L::kMoeGated, "{}.gate_proj.weight>w13_weight", Rule::kExpert, 1},
    {Role::kExpertUp, L::kMoeGated, "{}.up_proj.weight>w13_weight", Rule::kExpert, 0},
};

// The rows a kernel layout puts before kVllmRules (empty: none).
absl::Span<const RuleRow> KernelRules(EngineSpec::Kernel k) {
  if (k == EngineSpec::Kernel::kFlashinfer) return kFlashinferRules;
  return {};
}

// MLA without q_lora: kv_a_proj_with_mqa is its own replicated module.
constexpr RuleRow kKvaAlone = {Role::kMlaKVA, L::kAny, "", Rule::kReplicate, 0};

// Prefix renames (NemotronH's HF prefix), first match wins.
struct PrefixRename {
  const char* from;
  const char* to;
};
constexpr PrefixRename kPrefixRenames[] = {
    {"backbone.embeddings.", "model.embed_tokens."},
    {"backbone.", "model."},
};

// SGLang's names where they differ from vLLM's.
constexpr PrefixRename kSglangRenames[] = {
    {"fused_qkv_a_proj.", "fused_qkv_a_proj_with_mqa."},
};

std::string VllmName(const std::string& hf, const char* subst, bool sglang) {
  std::string name = hf;
  absl::string_view s(subst);
  size_t gt = s.find('>');
  if (gt != absl::string_view::npos) {
    std::string from(s.substr(0, gt)), to(s.substr(gt + 1));
    size_t pos = name.rfind(from);
    if (pos != std::string::npos) name.replace(pos, from.size(), to);
  }
  for (const PrefixRename& p : kPrefixRenames) {
    if (absl::StartsWith(name, p.from)) {
      name = absl::StrCat(p.to, name.substr(strlen(p.from)));
      break;
    }
  }
  if (sglang) {
    for (const PrefixRename& p : kSglangRenames) {
      size_t pos = name.rfind(p.from);
      if (pos != std::string::npos) name.replace(pos, strlen(p.from), p.to);
    }
  }
  return name;
}

}  // namespace

namespace {

constexpr EngineDTypeRow kEngineDTypes[] = {
    {Role::kMambaALog, DType::kF32, Transform::kNegExp},
};

// recipe=vllm: every NVFP4 global scale says so (plan/conversion.h reads
// it off the transform); INVALID_ARGUMENT naming the engine when the
// model has no routed experts to quantize.
absl::Status MarkNvfp4Vllm(const std::string& side, ModelTensors* m) {
  bool any = false;
  for (size_t t = 0; t < m->tensors.size(); ++t) {
    const int32_t g = m->global_of[t];
    if (g < 0) continue;
    m->tensors[g].transform = Transform::kNvfp4Vllm;
    any = true;
  }
  if (!any) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": recipe=vllm is vLLM's online NVFP4 (--quantization nvfp4_per_token), "
        "which quantizes routed MoE experts only and this model has none; an NVFP4 "
        "engine of a dense model loaded a ModelOpt checkpoint: recipe=modelopt"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Span<const EngineDTypeRow> EngineDTypes() { return kEngineDTypes; }

absl::StatusOr<ModelTensors> EngineModelTensors(const ModelConfig& config,
                                                const EngineSpec& spec) {
  ModelConfig c = config;
  const std::string side = absl::StrCat("engine ", EngineSpecString(spec));
  const bool fp8_block = c.quant && IsFp8Block(*c.quant);
  const bool fp8_tensor = c.quant == QuantFormat::kFp8Tensor;
  if (spec.kernel != EngineSpec::Kernel::kCheckpoint && fp8_tensor) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": kernel=", KernelName(spec.kernel), " on a per-tensor FP8 "
        "model: vLLM requantizes per-tensor FP8 weights with the max scale of "
        "each fused module (and FlashInfer keeps alpha scales derived from "
        "them), which refit does not write; serve a block-FP8 or BF16 model"));
  }
  if (IsDeepgemm(spec.kernel)) {
    if (!spec.quant.has_value() && !fp8_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          side, ": kernel=", KernelName(spec.kernel), " reads block-FP8 weights; the "
          "model is not block FP8: add quant=fp8"));
    }
  }
  if (spec.kernel != EngineSpec::Kernel::kCheckpoint && fp8_block && c.fp8_block != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": kernel=", KernelName(spec.kernel), " reads 128x128 FP8 "
        "blocks; the model's weight_block_size is ", c.fp8_block));
  }
  if (spec.quant == QuantFormat::kMxfp8 || spec.quant == QuantFormat::kNvfp4) {
    if (c.quant.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          side, ": quant=", QuantName(*spec.quant), " quantizes BF16/F16/F32 weights; the "
          "model is already FP8 (", fp8_block ? "block" : "per-tensor",
          "), which refit does not requantize to ", absl::AsciiStrToUpper(QuantName(*spec.quant))));
    }
    c.quant = spec.quant;
    c.quant_experts_only =
        spec.quant == QuantFormat::kNvfp4 && spec.recipe == EngineSpec::Recipe::kVllm;
  } else if (spec.quant.has_value()) {
    if (fp8_tensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine ", EngineSpecString(spec), ": quant=fp8 asks for FP8 block "
          "scales, but the model is per-tensor FP8"));
    }
    // quant=fp8 keeps a block-FP8 model's format; quant=fp8-ue8m0 rounds
    // the scales up to powers of two.
    if (!fp8_block || spec.quant == QuantFormat::kFp8BlockUe8m0) c.quant = spec.quant;
    if (c.fp8_block == 0) c.fp8_block = 128;
  }
  // DeepGEMM's engines hold block-FP8 weights requantized to power-of-two
  // scales.
  if (KernelTraits(spec.kernel).requant && c.quant && IsFp8Block(*c.quant)) {
    c.quant = QuantFormat::kFp8BlockRequantUe8m0;
  }
  REFIT_ASSIGN_OR_RETURN(ModelTensors m, BuildModelTensors(c));
  const KernelRow& kernel = KernelTraits(spec.kernel);
  const bool mx = m.quant == QuantFormat::kMxfp8, nv = m.quant == QuantFormat::kNvfp4;
  if ((nv || mx) && kernel.swizzle == ScaleSwizzle::kTiles128x4) {
    m.scale_swizzle = ScaleSwizzle::kTiles128x4;
  }
  m.swizzled_flat = m.scale_swizzle == ScaleSwizzle::kTiles128x4 && mx;
  if (m.swizzled_flat) {
    // vLLM's online MXFP8 MoE hands its experts to the backend that
    // select_mxfp8_moe_backend picks (FlashInfer TRTLLM shuffles them);
    // only the linear layers' F8_128x4 scales are written.
    for (size_t t = 0; t < m.tensors.size(); ++t) {
      if (m.tensors[t].stacked && m.scale_of[t] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            side, ": quant=mxfp8 with kernel=flashinfer writes the linear layers' "
            "swizzled scales (FlashInferCutlassMxfp8LinearKernel); the experts (",
            m.tensors[t].name, ") go to vLLM's MXFP8 MoE backend, whose FlashInfer "
            "TRTLLM layout refit does not write: serve the MoE model without kernel= "
            "(vLLM's MXFP8 emulation backends, linear and experts)"));
      }
    }
  }
  for (const EngineDTypeRow& row : kEngineDTypes) {
    for (size_t l = 0; l < m.layers.size(); ++l) {
      const int32_t t = m.Find(static_cast<int64_t>(l), row.role);
      if (t < 0) continue;
      m.tensors[t].dtype = row.dtype;
      m.tensors[t].transform = row.transform;
    }
  }
  if (kernel.swizzle == ScaleSwizzle::kPackedUe8m0) {
    // One exponent byte per weight row and tile column (mapping/packed_scales.h).
    m.scale_swizzle = ScaleSwizzle::kPackedUe8m0;
    for (size_t t = 0; t < m.tensors.size(); ++t) {
      const int32_t s = m.scale_of[t];
      if (s < 0) continue;
      TensorSpec& st = m.tensors[s];
      const size_t r = st.shape.size();
      st.shape[r - 2] = m.tensors[t].shape[r - 2];
      st.dtype = DType::kU8;
    }
  }
  if (nv && spec.recipe == EngineSpec::Recipe::kVllm) {
    REFIT_RETURN_IF_ERROR(MarkNvfp4Vllm(side, &m));
  }
  return m;
}

absl::StatusOr<MappedSide> BuildVllmLayout(const ModelConfig& c,
                                           const ModelTensors& model,
                                           const EngineSpec& spec) {
  const std::string side = absl::StrCat("engine ", EngineSpecString(spec));
  const int64_t tp = spec.tp, world = spec.world_size();
  const bool sglang = spec.kind == EngineSpec::Kind::kSglang;
  if (sglang && spec.ep > 0 &&
      (tp % spec.ep != 0 || (c.num_experts > 0 && c.num_experts % spec.ep != 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": sglang ep=", spec.ep, " must divide tp=", tp,
        " and the number of experts (", c.num_experts, ")"));
  }
  if (!sglang && spec.ep > 0 && spec.ep != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": ep=", spec.ep, " must equal tp*dp = ", world));
  }
  if (spec.round_robin && c.num_experts > 0 && c.num_expert_groups <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": placement=round_robin, but vLLM places the experts of a model "
        "without expert groups (n_group = ", c.num_expert_groups,
        ") linearly whatever --expert-placement-strategy says; use the "
        "default placement"));
  }
  if (!sglang && spec.ep > 0 && c.num_experts > 0 && c.num_experts < spec.ep) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": ep=", spec.ep, " ranks for only ", c.num_experts,
        " experts"));
  }
  LayoutBuilder b(model, static_cast<int32_t>(world), side,
                  /*derive_scales=*/true);
  const absl::Span<const RuleRow> table(kVllmRules);
  const absl::Span<const RuleRow> kernel_table = KernelRules(spec.kernel);
  const LayerKind none;
  std::vector<std::string> names(model.tensors.size());
  // Without vLLM's expert parallelism a rank holds what its TP peer of DP
  // replica 0 holds.
  const bool replicas_alike = sglang || spec.ep == 0;
  // vLLM's expert parallelism: rank k holds count(k) experts, the first
  // E mod ep ranks one more: linearly [begin(k), begin(k) + count(k)), or
  // round-robin k, k + ep, k + 2*ep, ...
  const int64_t ep_base = spec.ep > 0 ? c.num_experts / spec.ep : 0;
  const int64_t ep_rem = spec.ep > 0 ? c.num_experts % spec.ep : 0;
  auto ep_begin = [&](int64_t k) {
    return spec.round_robin ? k : k * ep_base + std::min(k, ep_rem);
  };
  auto ep_count = [&](int64_t k) { return ep_base + (k < ep_rem ? 1 : 0); };
  for (int32_t rank = 0; rank < world; ++rank) {
    if (replicas_alike && rank >= tp) {
      REFIT_RETURN_IF_ERROR(b.CloneRank(rank % tp, rank));
      continue;
    }
    // With it, a rank holds what its TP peer of the previous replica holds
    // but for its experts, when it holds as many.
    if (!replicas_alike && rank >= tp && ep_count(rank) == ep_count(rank - tp)) {
      REFIT_RETURN_IF_ERROR(b.CloneRank(rank - tp, rank,
                                        ep_begin(rank) - ep_begin(rank - tp)));
      continue;
    }
    RankCtx ctx;
    ctx.rank = rank;
    ctx.tp = tp;
    ctx.tp_rank = rank % tp;
    ctx.expert_style = ExpertStyle::kGrouped;
    ctx.vocab_padded = RoundUp(c.vocab_size, spec.vocab_pad);
    ctx.replicate_single_group = true;
    if (sglang && spec.ep > 0) {
      const int64_t moe_tp = tp / spec.ep;
      ctx.expert_count = c.num_experts / spec.ep;
      ctx.expert_begin = (ctx.tp_rank / moe_tp) * ctx.expert_count;
      ctx.etp = moe_tp;
      ctx.etp_rank = ctx.tp_rank % moe_tp;
    } else if (spec.ep > 0) {
      ctx.expert_begin = ep_begin(rank);
      ctx.expert_count = ep_count(rank);
      ctx.expert_stride = spec.round_robin ? spec.ep : 1;
      ctx.etp = 1;
      ctx.etp_rank = 0;
    } else {
      ctx.expert_begin = 0;
      ctx.expert_count = c.num_experts;
      ctx.etp = tp;
      ctx.etp_rank = ctx.tp_rank;
    }
    auto place = [&](const RuleRow& row, const LayerKind& kind, int32_t t) {
      return ApplyRule(b, c, ctx, row, kind, t,
                       VllmName(model.tensors[t].name, row.name, sglang));
    };
    const int32_t embed = model.Find(-1, Role::kEmbed);
    REFIT_RETURN_IF_ERROR(
        place(*FindRule(table, Role::kEmbed, none, true), none, embed));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const LayerKind& kind = model.layer_kinds[l];
      for (int r = 0; r < ModelTensors::kNumRoles; ++r) {
        const Role role = static_cast<Role>(r);
        const int32_t t = model.Find(l, role);
        if (t < 0) continue;
        const RuleRow* row = FindRule(kernel_table, role, kind, false);
        if (row == nullptr) row = FindRule(table, role, kind, false);
        if (role == Role::kMlaKVA && c.q_lora_rank == 0) row = &kKvaAlone;
        if (row == nullptr) {
          return absl::InternalError(
              absl::StrCat(side, ": no vllm rule for ", RoleName(role), " (",
                           model.tensors[t].name, ")"));
        }
        // Names do not depend on the rank: computed once per tensor.
        if (names[t].empty()) names[t] = VllmName(model.tensors[t].name, row->name, sglang);
        REFIT_RETURN_IF_ERROR(ApplyRule(b, c, ctx, *row, kind, t, names[t]));
      }
    }
    for (Role role : {Role::kFinalNorm, Role::kLmHead}) {
      const int32_t t = model.Find(-1, role);
      if (t < 0) continue;  // tied lm_head: vLLM shares embed_tokens
      REFIT_RETURN_IF_ERROR(place(*FindRule(table, role, none, true), none, t));
    }
  }
  b.SetHosts(spec.gpus_per_host);
  return std::move(b).Finish();
}

}  // namespace refit
