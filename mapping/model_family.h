// Model families: the logical tensors of a model (HF checkpoint names,
// global shapes, dtypes), each tagged with its Role so that conventions can
// place it by table lookup.
//
// Per-expert tensors are STACKED TensorSpecs (stacked = true, "{}" in the
// name for the expert index, dim 0 = expert), e.g.
// "model.layers.3.mlp.experts.{}.gate_proj.weight" [E, I, H].
//
// Every quantized weight, its scale and NVFP4 global scales carry the
// config's format in TensorSpec::format (roles codes, scales,
// global_scale); what the planner quantizes to.
// FP8 (config quant kFp8Block): every quantizable linear weight is f8e4m3 and
// has a companion f32 tensor "<...>.weight_scale_inv" of shape
// [ceil(out/b), ceil(in/b)] (leading dims kept; stacked for experts).
// Routers, norms, embeddings and lm_head stay bf16; the DeepSeek router
// bias (e_score_correction_bias) and KV-cache scales are f32.
// Per-tensor FP8 (config quant kFp8Tensor): the companion is an f32 scalar
// "<...>.weight_scale" ([E] for stacked experts).
// MXFP8 (config quant kMxfp8): the companion is a u8 "<...>.weight_scale" of shape
// [..., out, in/32] (E8M0 exponents), vLLM's Mxfp8OnlineLinearMethod /
// Mxfp8OnlineMoEMethod parameters after loading (mxfp8.py at 2aa8028).
// NVFP4 (config quant kNvfp4): the weight itself is u8 [..., out, in/2] (two E2M1
// codes a byte), its companion an f8e4m3 "<...>.weight_scale" [..., out,
// in/16]; the first part of each engine parameter (q of qkv, gate of
// gate/up, q_a of fused_qkv_a, every unfused weight) also has an f32
// global scale "<...>.weight_scale_2" ([E] for stacked experts) that the
// parameter's parts share (vLLM's ModelOpt NVFP4 parameters after
// loading, exec/nvfp4.h).
#ifndef REFIT_MAPPING_MODEL_FAMILY_H_
#define REFIT_MAPPING_MODEL_FAMILY_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "layout/quant_format.h"
#include "layout/tensor_spec.h"
#include "mapping/model_config.h"

namespace refit {

// What a logical tensor is, independent of family naming.
enum class Role : int {
  kEmbed,
  kFinalNorm,
  kLmHead,
  kInputNorm,     // pre-attention norm of a transformer layer
  kPostAttnNorm,  // pre-MLP norm of a transformer layer
  kBlockNorm,     // NemotronH: the one norm of a hybrid block
  kQ,
  kK,
  kV,
  kQBias,
  kKBias,
  kVBias,
  kQNorm,
  kKNorm,
  kO,
  kKScale,  // KV-cache scales, f32 scalars
  kVScale,
  kQScale,
  kMlaQA,  // q_a_proj [q_lora, H]
  kMlaQANorm,
  kMlaQB,  // q_b_proj [heads * qk_head_dim, q_lora]
  kMlaQ,   // q_proj [heads * qk_head_dim, H] (no q_lora)
  kMlaKVA,  // kv_a_proj_with_mqa [kv_lora + rope, H]
  kMlaKVANorm,
  kMlaKVB,  // kv_b_proj [heads * (nope + v), kv_lora]
  kGate,
  kUp,
  kDown,
  kRouter,
  kRouterBias,
  kExpertGate,  // stacked [E, I, H]
  kExpertUp,
  kExpertDown,  // stacked [E, H, I]
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kMambaInProj,  // [z; x; B; C; dt] rows
  kMambaConvW,   // [x; B; C] rows, [conv_dim, 1, K]
  kMambaConvB,
  kMambaALog,
  kMambaD,
  kMambaDtBias,
  kMambaNorm,
  kMambaOutProj,
  kNumRoles,
};

// Role name for messages ("q", "expert_gate", ...).
absl::string_view RoleName(Role r);

// What a layer is made of (for conventions whose names depend on it).
enum class Mixer { kNone, kGqa, kMla, kMamba };
enum class Ffn { kNone, kGated, kNonGated, kMoeGated, kMoeNonGated };
struct LayerKind {
  Mixer mixer = Mixer::kNone;
  Ffn ffn = Ffn::kNone;
};
inline bool IsMoe(Ffn f) { return f == Ffn::kMoeGated || f == Ffn::kMoeNonGated; }

struct ModelTensors {
  static constexpr int kNumRoles = static_cast<int>(Role::kNumRoles);
  using RoleIndex = std::array<int32_t, kNumRoles>;  // -1 = absent

  std::vector<TensorSpec> tensors;
  // Per tensor: index of its weight_scale_inv tensor, or -1.
  std::vector<int32_t> scale_of;
  // Per tensor: true for a weight_scale_inv tensor.
  std::vector<bool> is_scale;
  RoleIndex global{};  // embed, final norm, lm_head
  std::vector<LayerKind> layer_kinds;
  std::vector<RoleIndex> layers;  // per layer
  // The quantized weights' format (ModelConfig::quant; every quantized
  // weight, its scales and NVFP4 global scales carry it in
  // TensorSpec::format) and the FP8 block formats' tile edge.
  std::optional<QuantFormat> quant;
  int64_t fp8_block = 0;
  // How the block scales lie in their buffers (the engine's kernel=,
  // mapping/parallel_spec.h KernelRow::swizzle). kTiles128x4: NVFP4 or
  // MXFP8 scales in FlashInfer / CUTLASS's swizzled 128 x 4 tiles, padded
  // to whole tiles with zeros (kernel=flashinfer; layout_builder.h); NVFP4
  // dense weights are padded to multiples of 32 rows and columns as well.
  // kPackedUe8m0: FP8 block scales as DeepGEMM reads them on SM100
  // (kernel=deepgemm-sm100): each scale tensor u8 [..., N, ceil(K/128)]
  // (one exponent byte per weight row), its buffer int32 [...,
  // ceil(K/512), align(N, 4)] (mapping/packed_scales.h).
  ScaleSwizzle scale_swizzle = ScaleSwizzle::kRowMajor;
  // The swizzled scales of a weight held flat, [Mp * Kp] (vLLM's MXFP8
  // linear), not [.., Mp, Kp] (NVFP4).
  bool swizzled_flat = false;
  // Per tensor: index of its NVFP4 global scale tensor, or -1.
  std::vector<int32_t> global_of;
  // Per tensor: the NVFP4 global scale tensor of its engine parameter (its
  // own, or its leader's: k and v share q's), or -1.
  std::vector<int32_t> global_group;

  // The block of one scale element on a weight's last two dims, in the
  // weight's own elements: (fp8_block, fp8_block), (1, 32) for MXFP8, (1, 8)
  // for NVFP4 (8 bytes of packed codes, 16 values); (0, 0) for per-tensor
  // scales or none. From the format's row (layout/quant_format.h).
  int64_t scale_block_rows() const {
    if (!quant) return 0;
    return IsFp8Block(*quant) ? fp8_block : QuantFormatTraits(*quant).block_rows;
  }
  int64_t scale_block_cols() const {
    if (!quant) return 0;
    const QuantFormatRow& row = QuantFormatTraits(*quant);
    return IsFp8Block(*quant) ? fp8_block : row.block_cols / row.codes_per_byte;
  }

  // Tensor index of `role` in `layer` (layer < 0: global), -1 if absent.
  int32_t Find(int64_t layer, Role role) const {
    const RoleIndex& ix = layer < 0 ? global : layers[layer];
    return ix[static_cast<int>(role)];
  }
};

// The logical tensors of a model, in checkpoint order (embedding, layers,
// final norm, lm_head). Fails with INVALID_ARGUMENT if the config is
// inconsistent (ValidateModelConfig) or an FP8 weight has rank < 2.
absl::StatusOr<ModelTensors> BuildModelTensors(const ModelConfig& config);

// The name of the companion scale of a weight or buffer name: "_scale_inv"
// inserted after the last "weight" ("qkv_proj.weight" ->
// "qkv_proj.weight_scale_inv", "linear_fc1.weight3" ->
// "linear_fc1.weight_scale_inv3", "w13_weight" -> "w13_weight_scale_inv").
std::string ScaleName(absl::string_view weight_name);

// The NVFP4 global scale of a weight: "_scale_2" inserted after the last
// "weight" ("q_proj.weight" -> "q_proj.weight_scale_2").
std::string GlobalScaleName(absl::string_view weight_name);

// The engine buffer holding an NVFP4 parameter's global scale, as vLLM
// names it after loading: "w13_weight" -> "w13_weight_scale_2" (MoE),
// "qkv_proj.weight" -> "qkv_proj.weight_global_scale" (dense).
std::string GlobalScaleBufferName(absl::string_view weight_buffer_name);

// The per-tensor scale name: "_scale" inserted after the last "weight"
// ("o_proj.weight" -> "o_proj.weight_scale", "w13_weight" ->
// "w13_weight_scale").
std::string PerTensorScaleName(absl::string_view weight_name);

}  // namespace refit

#endif  // REFIT_MAPPING_MODEL_FAMILY_H_
