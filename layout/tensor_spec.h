// TensorSpec: a logical tensor, named by its HF checkpoint name
// (e.g. "model.layers.3.mlp.experts.17.gate_proj.weight"), with its global
// shape and dtype. Quantization scales are logical tensors of their own.
#ifndef REFIT_LAYOUT_TENSOR_SPEC_H_
#define REFIT_LAYOUT_TENSOR_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/quant_format.h"

namespace refit {

// How an engine tensor's value derives from the checkpoint's, where it is
// not the value itself (destination side only; the sender computes it,
// plan/conversion.h). vLLM keeps NemotronH's Mamba `A = -exp(A_log)` as an
// f32 parameter where trainers and checkpoints hold `A_log`: the engine
// side declares the logical tensor A_log, f32, with transform kNegExp.
// (A quantized tensor says its format in TensorSpec::format instead.)
enum class Transform : int32_t {
  kNone = 0,
  kNegExp = 1,  // x -> -exp(x); f32 only
  // 2 and 3 are retired (FP8 block scales' UE8M0 rounding and requantizing
  // are the formats kFp8BlockUe8m0 and kFp8BlockRequantUe8m0).
  kNvfp4Vllm = 4,  // an NVFP4 global scale (weight_scale_2) and its weights'
                   // codes and block scales as vLLM's online quantization
                   // makes them (plan/conversion.h: Nvfp4Recipe::kVllm);
                   // f32 global scale tensors only
};

// "none", "neg_exp", "nvfp4_vllm".
const char* TransformName(Transform t);

// The part a tensor plays in its quantized format (TensorSpec::format).
enum class QuantRole : int32_t {
  kNone = 0,         // a tensor of a plain dtype (no format)
  kCodes = 1,        // a weight's codes (the format row's code_dtype)
  kScales = 2,       // its block or per-tensor scales (the row's scale_dtype)
  kGlobalScale = 3,  // NVFP4: the f32 global scale of an engine parameter
};

// "none", "codes", "scales", "global_scale".
const char* QuantRoleName(QuantRole r);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
  // A stacked tensor is many checkpoint tensors of one shape planned as one:
  // index i of dim 0 is the HF tensor whose name is `name` with its "{}"
  // replaced by i. E.g. "model.layers.3.mlp.experts.{}.gate_proj.weight" of
  // shape [256, 2048, 7168] stands for 256 expert tensors [2048, 7168].
  // Experts are planned this way so that a 256-expert model costs records
  // per rank, not per expert.
  bool stacked = false;
  // Destination side only (the planner rejects it on the source side).
  Transform transform = Transform::kNone;
  // The quantized format the tensor is part of (layout/quant_format.h) and
  // its role in it: an FP8 block weight is format kFp8Block, role kCodes,
  // and its `_scale_inv` tensor format kFp8Block, role kScales. nullopt and
  // kNone: a plain dtype. The planner quantizes to what the engine's
  // tensors say here, and moves a quantized trainer's tensors as bytes
  // into an engine tensor of the same format and role.
  std::optional<QuantFormat> format;
  QuantRole quant_role = QuantRole::kNone;

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
           a.stacked == b.stacked && a.transform == b.transform && a.format == b.format &&
           a.quant_role == b.quant_role;
  }
};

// The HF name of index `i` of a stacked tensor (name with "{}" replaced by
// i); the name itself for an unstacked one.
std::string MemberName(const TensorSpec& t, int64_t i);

// A readable name for the part `box` of t, for error messages:
// "w [0:4, 8:16]", or for a stacked tensor
// "model.layers.3.mlp.experts.{16..31}.up_proj.weight [0:2048, 0:7168]".
std::string DescribePart(const TensorSpec& t, const Box& box);

// OK if the name is non-empty, every dim >= 0, the byte size fits int64,
// the transform is known and fits the dtype, and the format and role agree
// with each other and with the dtype (codes of the format row's code
// dtype, scales of a row's scale dtype, an NVFP4 global scale f32); else
// INVALID_ARGUMENT naming the tensor (e.g. "tensor w: format nvfp4 holds
// its codes as u8, not bf16").
absl::Status ValidateTensorSpec(const TensorSpec& t);

// `t` with format `f` in role `role`.
TensorSpec WithFormat(TensorSpec t, QuantFormat f, QuantRole role);

// "nvfp4 codes", "fp8_block scales"; "" for a plain tensor.
std::string TensorFormatString(const TensorSpec& t);

// "name bf16[4096, 1024]"
std::string TensorSpecString(const TensorSpec& t);

}  // namespace refit

#endif  // REFIT_LAYOUT_TENSOR_SPEC_H_
