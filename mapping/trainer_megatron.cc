#include "mapping/trainer_megatron.h"

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/conventions.h"
#include "mapping/gtp.h"

namespace refit {
namespace {

using L = LayerMatch;

constexpr RuleRow kMegatronRules[] = {
    {Role::kEmbed, L::kAny, "embedding.word_embeddings.weight", Rule::kVocab, 0},
    {Role::kLmHead, L::kAny, "output_layer.weight", Rule::kVocab, 0},
    {Role::kFinalNorm, L::kAny, "decoder.final_layernorm.weight", Rule::kReplicate, 0},
    {Role::kInputNorm, L::kGqa, "self_attention.linear_qkv.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kInputNorm, L::kMla, "input_layernorm.weight", Rule::kReplicate, 0},
    {Role::kPostAttnNorm, L::kMoe, "pre_mlp_layernorm.weight", Rule::kReplicate, 0},
    {Role::kPostAttnNorm, L::kAny, "mlp.linear_fc1.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kBlockNorm, L::kMamba, "mixer.in_proj.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kBlockNorm, L::kGqa, "self_attention.linear_qkv.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kBlockNorm, L::kMoe, "pre_mlp_layernorm.weight", Rule::kReplicate, 0},
    {Role::kBlockNorm, L::kAny, "mlp.linear_fc1.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kQ, L::kAny, "self_attention.linear_qkv.weight", Rule::kQkvGrouped, 0},
    {Role::kK, L::kAny, "self_attention.linear_qkv.weight", Rule::kQkvGrouped, 1},
    {Role::kV, L::kAny, "self_attention.linear_qkv.weight", Rule::kQkvGrouped, 2},
    {Role::kQBias, L::kAny, "self_attention.linear_qkv.bias", Rule::kQkvGrouped, 0},
    {Role::kKBias, L::kAny, "self_attention.linear_qkv.bias", Rule::kQkvGrouped, 1},
    {Role::kVBias, L::kAny, "self_attention.linear_qkv.bias", Rule::kQkvGrouped, 2},
    {Role::kQNorm, L::kAny, "self_attention.q_layernorm.weight", Rule::kReplicate, 0},
    {Role::kKNorm, L::kAny, "self_attention.k_layernorm.weight", Rule::kReplicate, 0},
    {Role::kO, L::kAny, "self_attention.linear_proj.weight", Rule::kRow, 0},
    {Role::kKScale, L::kAny, "self_attention.k_scale", Rule::kReplicate, 0},
    {Role::kVScale, L::kAny, "self_attention.v_scale", Rule::kReplicate, 0},
    {Role::kQScale, L::kAny, "self_attention.q_scale", Rule::kReplicate, 0},
    {Role::kMlaQA, L::kAny, "self_attention.linear_q_down_proj.weight", Rule::kReplicate, 0},
    {Role::kMlaQANorm, L::kAny, "self_attention.linear_q_up_proj.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kMlaQB, L::kAny, "self_attention.linear_q_up_proj.weight", Rule::kColumn, 0},
    {Role::kMlaQ, L::kAny, "self_attention.linear_q_proj.weight", Rule::kColumn, 0},
    {Role::kMlaKVA, L::kAny, "self_attention.linear_kv_down_proj.weight", Rule::kReplicate, 0},
    {Role::kMlaKVANorm, L::kAny, "self_attention.linear_kv_up_proj.layer_norm_weight", Rule::kReplicate, 0},
    {Role::kMlaKVB, L::kAny, "self_attention.linear_kv_up_proj.weight", Rule::kColumn, 0},
    {Role::kGate, L::kAny, "mlp.linear_fc1.weight", Rule::kGlu, 0},
    {Role::kUp, L::kGated, "mlp.linear_fc1.weight", Rule::kGlu, 1},
    {Role::kUp, L::kAny, "mlp.linear_fc1.weight", Rule::kColumn, 0},
    {Role::kDown, L::kAny, "mlp.linear_fc2.weight", Rule::kRow, 0},
    {Role::kRouter, L::kAny, "mlp.router.weight", Rule::kReplicate, 0},
    {Role::kRouterBias, L::kAny, "mlp.router.expert_bias", Rule::kReplicate, 0},
    {Role::kExpertGate, L::kAny, "mlp.experts.linear_fc1.weight", Rule::kExpert, 0},
    {Role::kExpertUp, L::kAny, "mlp.experts.linear_fc1.weight", Rule::kExpert, 1},
    {Role::kExpertDown, L::kAny, "mlp.experts.linear_fc2.weight", Rule::kExpert, 2},
    {Role::kSharedGate, L::kAny, "mlp.shared_experts.linear_fc1.weight", Rule::kGlu, 0},
    {Role::kSharedUp, L::kMoeGated, "mlp.shared_experts.linear_fc1.weight", Rule::kGlu, 1},
    {Role::kSharedUp, L::kAny, "mlp.shared_experts.linear_fc1.weight", Rule::kColumn, 0},
    {Role::kSharedDown, L::kAny, "mlp.shared_experts.linear_fc2.weight", Rule::kRow, 0},
    {Role::kMambaInProj, L::kAny, "mixer.in_proj.weight", Rule::kMambaInProj, 0},
    {Role::kMambaConvW, L::kAny, "mixer.conv1d.weight", Rule::kMambaConv, 0},
    {Role::kMambaConvB, L::kAny, "mixer.conv1d.bias", Rule::kMambaConv, 0},
    {Role::kMambaALog, L::kAny, "mixer.A_log", Rule::kColumn, 0},
    {Role::kMambaD, L::kAny, "mixer.D", Rule::kColumn, 0},
    {Role::kMambaDtBias, L::kAny, "mixer.dt_bias", Rule::kColumn, 0},
    {Role::kMambaNorm, L::kAny, "mixer.norm.weight", Rule::kColumn, 0},
    {Role::kMambaOutProj, L::kAny, "mixer.out_proj.weight", Rule::kRow, 0},
};

// MambaModel (NemotronH) names its final norm differently.
constexpr RuleRow kMambaFinalNorm = {Role::kFinalNorm, L::kAny,
                                     "decoder.final_norm.weight",
                                     Rule::kReplicate, 0};

}  // namespace

absl::StatusOr<MappedSide> BuildMegatronLayout(const ModelConfig& c,
                                               const ModelTensors& model,
                                               const TrainerSpec& spec) {
  if (spec.kind != TrainerSpec::Kind::kMegatron) {
    return absl::InvalidArgumentError("BuildMegatronLayout: not a megatron spec");
  }
  const std::string side = absl::StrCat("trainer ", TrainerSpecString(spec));
  auto fail = [&](const absl::Status& s) { return AnnotateStatus(s, side); };
  const int64_t tp = spec.tp, pp = spec.pp;
  const int64_t etp = spec.expert_tp(), ep = spec.ep;
  // Ranks of one stage: tp*gtp*dp (GTP's row slices come after the rules,
  // ApplyGtp; the rules give each rank its TP-local parameters).
  const int64_t stage_size = spec.stage_size();
  if (stage_size % (etp * ep * spec.egtp) != 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "etp*ep*egtp = ", etp * ep * spec.egtp, " must divide tp*gtp*dp = ",
        stage_size)));
  }
  absl::StatusOr<std::vector<int64_t>> stage_layers =
      PipelineStageLayers(c.num_layers, spec);
  if (!stage_layers.ok()) return fail(stage_layers.status());
  std::vector<int64_t> stage_start(pp + 1, 0);
  for (int64_t s = 0; s < pp; ++s) {
    stage_start[s + 1] = stage_start[s] + (*stage_layers)[s];
  }
  int64_t experts_local = 0;
  if (c.num_experts > 0) {
    REFIT_RETURN_IF_ERROR(
        fail(CheckDivides(c.num_experts, ep, "number of experts", "ep")));
    experts_local = c.num_experts / ep;
  }
  const int32_t world = spec.world_size();
  LayoutBuilder b(model, world, side, /*derive_scales=*/true);
  std::vector<int32_t> stage_of_rank(world);
  const absl::Span<const RuleRow> table(kMegatronRules);
  const LayerKind none;
  std::vector<std::string> names(model.tensors.size());
  // Ranks of one stage whose TP and expert-TP coordinates agree (w equal
  // modulo lcm(tp, etp), which divides tp*gtp*dp) hold the same parameters,
  // but for which experts: the first of them is built by the rules, the
  // others copy it with the expert index moved (CloneRank).
  const int64_t coords = std::lcm(tp, etp);
  auto expert_begin = [&](int64_t w) {
    return ((w / etp) % ep) * experts_local;
  };
  for (int32_t rank = 0; rank < world; ++rank) {
    const int64_t tp_rank = rank % tp;
    const int64_t stage = rank / stage_size;
    const int64_t w = rank % stage_size;
    stage_of_rank[rank] = static_cast<int32_t>(stage);
    if (w >= coords) {
      const int64_t twin = w % coords;
      REFIT_RETURN_IF_ERROR(b.CloneRank(
          static_cast<int32_t>(stage * stage_size + twin), rank,
          expert_begin(w) - expert_begin(twin)));
      continue;
    }
    RankCtx ctx;
    ctx.rank = rank;
    ctx.tp = tp;
    ctx.tp_rank = tp_rank;
    ctx.etp = etp;
    ctx.etp_rank = w % etp;
    ctx.expert_count = experts_local;
    ctx.expert_begin = expert_begin(w);
    ctx.expert_style =
        spec.grouped_experts ? ExpertStyle::kGrouped : ExpertStyle::kIndexed;
    ctx.glu_chunk = spec.glu_chunk;
    ctx.vocab_padded = RoundUp(c.vocab_size, spec.vocab_divisor * tp);

    auto place_global = [&](Role role, const RuleRow* row, int32_t t) {
      if (t < 0) return absl::OkStatus();
      if (row == nullptr) row = FindRule(table, role, none, true);
      return ApplyRule(b, c, ctx, *row, none, t, row->name);
    };
    if (stage == 0) {
      REFIT_RETURN_IF_ERROR(place_global(Role::kEmbed, nullptr,
                                         model.Find(-1, Role::kEmbed)));
    }
    for (int64_t l = stage_start[stage]; l < stage_start[stage + 1]; ++l) {
      const LayerKind& kind = model.layer_kinds[l];
      const std::string prefix =
          absl::StrCat("decoder.layers.", l - stage_start[stage], ".");
      for (int r = 0; r < ModelTensors::kNumRoles; ++r) {
        const Role role = static_cast<Role>(r);
        const int32_t t = model.Find(l, role);
        if (t < 0) continue;
        const RuleRow* row = FindRule(table, role, kind, false);
        if (row == nullptr) {
          return absl::InternalError(
              absl::StrCat(side, ": no megatron rule for ", RoleName(role),
                           " (", model.tensors[t].name, ")"));
        }
        // A layer's stage and local index do not depend on the rank.
        if (names[t].empty()) names[t] = prefix + row->name;
        REFIT_RETURN_IF_ERROR(ApplyRule(b, c, ctx, *row, kind, t, names[t]));
      }
    }
    if (stage == pp - 1) {
      REFIT_RETURN_IF_ERROR(place_global(
          Role::kFinalNorm,
          c.family == ModelFamily::kNemotronH ? &kMambaFinalNorm : nullptr,
          model.Find(-1, Role::kFinalNorm)));
      int32_t head = model.Find(-1, Role::kLmHead);
      if (head < 0 && pp > 1) head = model.Find(-1, Role::kEmbed);  // tied
      REFIT_RETURN_IF_ERROR(place_global(Role::kLmHead, nullptr, head));
    }
  }
  b.SetStage(std::move(stage_of_rank));
  b.SetHosts(spec.gpus_per_host);
  REFIT_ASSIGN_OR_RETURN(MappedSide out, std::move(b).Finish());
  REFIT_RETURN_IF_ERROR(ApplyGtp(model, spec, side, &out));
  return out;
}

}  // namespace refit
