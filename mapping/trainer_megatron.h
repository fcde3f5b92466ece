// The Megatron-Core trainer convention: where each logical tensor lives on
// each rank of a Megatron-Core GPT / Mamba (hybrid) model.
//
// Rank order (Megatron's default "tp-cp-ep-dp-pp", cp = 1):
//   rank = (pp * DP + dp) * TP + tp.
// Expert parameters use their own mesh inside each pipeline stage, over the
// same TP*DP ranks: with w = rank mod (TP*DP),
//   w = (edp * EP + ep) * ETP + etp,   EDP = TP*DP / (EP*ETP).
// An ep rank holds experts [ep*E/EP, (ep+1)*E/EP); etp shards their
// intermediate dim. Dense parameters are replicated over dp, experts over
// edp; every replica gets records (all of them are sources).
// With GTP (gtp=, egtp=; mapping/gtp.h) a stage has TP*GTP*DP ranks,
//   rank = ((pp * DP + dp) * GTP + g) * TP + tp,
//   w = ((edp * EGTP + eg) * EP + ep) * ETP + etp,
// and each rank holds row slice g (eg for experts) of its TP-local weights.
//
// Parameter names are Megatron's own (TE spec), with LOCAL layer numbering
// per pipeline stage, as Megatron names its modules: stage s's first layer
// is "decoder.layers.0". Names:
//   embedding.word_embeddings.weight        [Vp/TP, H] (first stage)
//   output_layer.weight                     [Vp/TP, H] (last stage; also the
//        tied embedding's copy there when tie_word_embeddings and pp > 1)
//   decoder.final_layernorm.weight (GPT) / decoder.final_norm.weight (Mamba)
//   decoder.layers.<l>.self_attention.linear_qkv.weight   per query group
//        [q heads of the group; k; v], groups nkv/TP per rank (.bias alike)
//   ...linear_qkv.layer_norm_weight, self_attention.q_layernorm.weight,
//   k_layernorm.weight, self_attention.linear_proj.weight [H, Q/TP]
//   MLA: input_layernorm.weight, self_attention.linear_q_down_proj.weight
//        (replicated), linear_q_up_proj.{weight [QB/TP, q_lora],
//        layer_norm_weight}, linear_q_proj.weight, linear_kv_down_proj.weight
//        (replicated), linear_kv_up_proj.{weight, layer_norm_weight}
//   mlp.linear_fc1.weight [gate_l; up_l] (up only when non-gated),
//   mlp.linear_fc1.layer_norm_weight, mlp.linear_fc2.weight [H, I/TP]
//   MoE: pre_mlp_layernorm.weight, mlp.router.weight, mlp.router.expert_bias
//        (f32), mlp.experts.linear_fc1.weight<j> [2*Im/ETP, H] and
//        mlp.experts.linear_fc2.weight<j> [H, Im/ETP] per local expert j
//        (experts=indexed), or mlp.experts.linear_fc1.weight
//        [E/EP, 2*Im/ETP, H] / linear_fc2.weight [E/EP, H, Im/ETP]
//        (experts=grouped); with glu_chunk=c the fc1 rows alternate c gate
//        rows and c up rows. mlp.shared_experts.linear_fc{1,2}.weight as the
//        dense MLP.
//   Mamba: mixer.in_proj.{weight [z_l; x_l; B_l; C_l; dt_l], layer_norm_weight},
//        mixer.conv1d.{weight, bias} [x_l; B_l; C_l], mixer.A_log, mixer.D,
//        mixer.dt_bias, mixer.norm.weight (all /TP), mixer.out_proj.weight
// Vocabulary: padded to a multiple of vocab_div * TP; padding rows have no
// record. KV-cache scales: self_attention.{k,v,q}_scale, replicated.
// FP8 (blocks): each FP8 weight buffer has a companion ScaleName(name)
// buffer ("linear_fc1.weight_scale_inv3") whose blocks follow the weight's.
// FP8 (per tensor): a PerTensorScaleName(name) buffer with one f32 per fused
// weight: "linear_qkv.weight_scale" [3], "linear_fc1.weight_scale" [2],
// "experts.linear_fc1.weight_scale<j>" [2] (indexed) or [E_local, 2]
// (grouped), "experts.linear_fc2.weight_scale" [E_local].
#ifndef REFIT_MAPPING_TRAINER_MEGATRON_H_
#define REFIT_MAPPING_TRAINER_MEGATRON_H_

#include "absl/status/statusor.h"
#include "mapping/layout_builder.h"
#include "mapping/model_config.h"
#include "mapping/model_family.h"
#include "mapping/parallel_spec.h"

namespace refit {

// The Megatron layout of `model` under `spec` (spec.kind must be
// kMegatron). INVALID_ARGUMENT naming the size and the parallel axis when
// the model cannot be laid out so (TP not dividing the query groups, EP not
// dividing the experts, pipeline split, an FP8 block split, ...).
absl::StatusOr<MappedSide> BuildMegatronLayout(const ModelConfig& config,
                                               const ModelTensors& model,
                                               const TrainerSpec& spec);

}  // namespace refit

#endif  // REFIT_MAPPING_TRAINER_MEGATRON_H_
