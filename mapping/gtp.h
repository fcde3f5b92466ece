// Megatron trainers whose linear weights are Transformer Engine's native
// low-precision tensors, and Megatron-LM's Generalized Tensor Parallelism
// (GTP_remat): a rewrite of the Megatron side that the plain rules built.
//
// Read in NVIDIA/Megatron-LM: docs/api-guide/core/
// generalized_tensor_parallel.md at 019618e (§1.3, §1.4, §3.7), and at
// d98e8a6 megatron/core/tensor_parallel/generalized_tensor_parallelism.py:
// gtp_remat_shard_dim0, _gtp_slice_one_param, GTPShardedParam._strip_padding;
// megatron/core/extensions/transformer_engine.py: _gtp_pre_init;
// megatron/core/parallel_state.py: _inject_gtp_remat_axis) and
// NVIDIA/TransformerEngine at 00768c7 (pytorch/tensor/mxfp8_tensor.py:
// MXFP8Quantizer.make_empty, get_scale_shape) and 0163495
// (pytorch/tensor/nvfp4_tensor.py: NVFP4Quantizer.get_scale_shape,
// make_empty).
//
// GTP: every TP-local weight of a sharded linear (table kGtpRoles in
// gtp.cc) is padded at the tail of dim 0 to a multiple of
// pad_for_alignment * G rows (pad_for_alignment = 32 for MXFP8, 16 for
// NVFP4, 1 for BF16 weights) and cut into G equal row slices, slice g on
// GTP rank g; G = gtp for dense weights (rank order
// tp-gtp-cp-ep-dp-pp: g = (w / tp) % gtp of stage rank w), egtp for routed
// experts (tp-cp-ep-gtp-dp-pp: g = (w / (etp * ep)) % egtp). Padding rows
// have no record, so they never reach an engine; a slice may be all
// padding. Norms, biases, the router and Mamba's small tensors stay whole.
//
// TE's native tensors (weights=mxfp8|nvfp4): the rowwise data of each
// shard [S, K] (MXFP8 e4m3) or [S, K/2] (NVFP4, two E2M1 codes a byte),
// and its compact (not GEMM-swizzled) rowwise_scale_inv, u8 (E8M0) or
// e4m3, padded as TE allocates it: [round_up(S, 128), round_up(K/32, 4)]
// (MXFP8) or [round_up(S, 128), round_up(K/16, 4)] (NVFP4), the padding
// unsourced. NVFP4's per-tensor scale is registered as the f32 decode
// scale the engine keeps (vLLM's weight_scale_2): TE's amax_rowwise /
// (6 * 448), one per parameter ([E_local] for grouped experts).
#ifndef REFIT_MAPPING_GTP_H_
#define REFIT_MAPPING_GTP_H_

#include <string>

#include "absl/status/status.h"
#include "mapping/layout_builder.h"
#include "mapping/model_family.h"
#include "mapping/parallel_spec.h"

namespace refit {

// Rewrites `side`, built by the Megatron rules for `spec` (stage ranks
// tp*gtp*dp, each holding its TP-local parameters), into GTP row slices
// and TE's scale_inv shapes as above. Does nothing when spec has gtp =
// egtp = 1 and weights=model. INVALID_ARGUMENT naming the parameter and
// rank (prefixed with `side_name`) for what the trainer cannot hold so:
// egtp > 1 with experts=grouped, GTP on a block- or per-tensor-FP8 model,
// and, with weights=nvfp4, a parameter whose amax vLLM's global scale
// cannot take (a TP or expert-TP shard under amax=gtp, or a parameter
// holding a part of an engine parameter without its other parts).
absl::Status ApplyGtp(const ModelTensors& model, const TrainerSpec& spec,
                      const std::string& side_name, MappedSide* side);

}  // namespace refit

#endif  // REFIT_MAPPING_GTP_H_
