// The vLLM engine convention: vLLM's parameter names and local shapes per
// engine rank.
//
// Engine rank k = dp_rank * TP + tp_rank. Every DP replica holds the whole
// TP-sharded model; with expert parallelism (ep = TP*DP) the experts are
// spread over all ranks instead (ep rank = k; E/ep each, the first E mod ep
// ranks one more, as vLLM's expert map: a contiguous run, or with
// placement=round_robin experts k, k + ep, k + 2*ep, ...) and are not
// TP-sharded.
//
// Names are vLLM's (HF names with the fused modules substituted):
//   model.embed_tokens.weight / lm_head.weight  [Vp/TP, H], Vp = vocabulary
//        padded to a multiple of 64; rows past the vocabulary are padding
//   self_attn.qkv_proj.{weight,bias} = [q_l; k_l; v_l]; when TP > kv heads,
//        each kv head is replicated on TP/kv consecutive ranks
//   self_attn.o_proj.weight [H, Q/TP]; q_norm / k_norm / layer norms replicated
//   mlp.gate_up_proj.weight [gate_l; up_l]; mlp.down_proj.weight [H, I/TP]
//   mlp.gate.weight, mlp.gate.e_score_correction_bias: replicated
//   mlp.experts.w13_weight [E_local, 2*I_l, H] (gate then up; up only for a
//        non-gated MoE), mlp.experts.w2_weight [E_local, H, I_l]; I_l = Im/TP
//        (TP-sharded experts, E_local = E) or Im (expert parallel)
//   mlp.shared_experts.{gate_up_proj, down_proj}.weight as the dense MLP
//   MLA: self_attn.fused_qkv_a_proj.weight = [q_a_proj; kv_a_proj_with_mqa]
//        (replicated), q_b_proj / kv_b_proj column-parallel, o_proj row
//   self_attn.attn.{k,v,q}_scale: KV-cache scales, replicated
//   NemotronH: "backbone." -> "model.", embeddings -> embed_tokens; Mamba2
//        mixer.in_proj.weight [z_l; x_l; B_l; C_l; dt_l], conv1d [x_l; B_l;
//        C_l] (with n_groups == 1, B and C whole on every rank), A (vLLM
//        creates it f32 and loads -exp(A_log.float()): the engine tensor
//        A_log is f32 with transform neg_exp, computed by the sender),
//        D, dt_bias, norm.weight sharded by TP, out_proj row-parallel.
// FP8 (block b): every FP8 weight buffer X has a companion X_scale_inv
// buffer ("qkv_proj.weight_scale_inv", "w13_weight_scale_inv") whose blocks
// follow their weight blocks, for fused buffers too.
// Per-tensor FP8: X_scale holds one f32 per fused weight:
// "qkv_proj.weight_scale" [3] (q, k, v), "gate_up_proj.weight_scale" [2],
// "o_proj.weight_scale" [1], "experts.w13_weight_scale" [E_local, 2]
// (gate, up; [E_local] when non-gated), "experts.w2_weight_scale" [E_local].
//
// Kernel layouts (spec.kernel, docs/kernel-layouts.md), rows placed before
// the table's own:
//   kernel=flashinfer: mlp.experts.w13_weight [E_local, 2*I_l, H] is
//        [up_l; gate_l] (FlashInfer CUTLASS fused MoE's w31), and so are its
//        block scales (w13_weight_scale_inv follows the weight's blocks).
//   kernel=deepgemm: every block-FP8 weight holds vLLM's UE8M0
//        requantization of the float-scale checkpoint bytes, and its
//        weight_scale_inv the power-of-two scales, row-major f32 (the scale
//        tensors carry transform ue8m0_requant; the senders compute it,
//        plan/conversion.h).
//   kernel=deepgemm-sm100: the same weights; each weight_scale_inv holds
//        the exponent bytes of DeepGEMM's SM100 layout: the tensor u8
//        [..., N, ceil(K/128)] (a row's tile exponents), the buffer int32
//        [..., ceil(K/512), align(N, 4)] (mapping/packed_scales.h).
// SGLang (spec kind kSglang) shares these conventions except: MLA's fused
// module is "self_attn.fused_qkv_a_proj_with_mqa", and expert parallelism
// (ep dividing tp) spreads the experts over ep ranks of each TP group (ep
// rank = tp_rank / (tp/ep), E/ep experts each), each expert TP-sharded over
// tp/ep ranks (rank tp_rank mod (tp/ep)); DP replicas repeat everything.
#ifndef REFIT_MAPPING_ENGINE_VLLM_H_
#define REFIT_MAPPING_ENGINE_VLLM_H_

#include "absl/status/statusor.h"
#include "mapping/layout_builder.h"
#include "mapping/model_config.h"
#include "mapping/model_family.h"
#include "mapping/parallel_spec.h"

namespace refit {

// The dtype vLLM (and SGLang) create a parameter in where it is not the
// checkpoint's, by role (kNumRoles: none). Read from their model and layer
// sources: MambaMixer2 creates A as torch.float32 whatever the model dtype
// (vllm/model_executor/layers/mamba/mamba_mixer2.py; SGLang's copy too).
// Router biases (e_score_correction_bias) and FP8 scales are f32 in the
// checkpoint already, so they need no row.
struct EngineDTypeRow {
  Role role;
  DType dtype;
  Transform transform;
};
absl::Span<const EngineDTypeRow> EngineDTypes();

// `model` as the engine holds it: EngineDTypes applied, and under
// spec.quant every quantizable weight FP8 with its weight_scale_inv tensor
// (scales with transform pow2_ceil under fp8-ue8m0, ue8m0_requant under
// kernel=deepgemm). INVALID_ARGUMENT for quant=fp8 on a per-tensor FP8
// model, a kernel= layout on a per-tensor FP8 model or with blocks other
// than 128, and kernel=deepgemm without block-FP8 weights.
absl::StatusOr<ModelTensors> EngineModelTensors(const ModelConfig& config,
                                                const EngineSpec& spec);

// The vLLM layout of `model` under `spec`. INVALID_ARGUMENT naming the size
// and the axis when impossible (TP not dividing the heads, the padded
// vocabulary, the intermediate size, an FP8 block split, ...).
absl::StatusOr<MappedSide> BuildVllmLayout(const ModelConfig& config,
                                           const ModelTensors& model,
                                           const EngineSpec& spec);

}  // namespace refit

#endif  // REFIT_MAPPING_ENGINE_VLLM_H_
