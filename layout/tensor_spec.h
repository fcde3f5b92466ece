// TensorSpec: a logical tensor, named by its HF checkpoint name
// (e.g. "model.layers.3.mlp.experts.17.gate_proj.weight"), with its global
// shape and dtype. Quantization scales are logical tensors of their own.
#ifndef REFIT_LAYOUT_TENSOR_SPEC_H_
#define REFIT_LAYOUT_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/box.h"
#include "layout/dtype.h"

namespace refit {

// How an engine tensor's value derives from the checkpoint's, where it is
// not the value itself (destination side only; the sender computes it,
// plan/conversion.h). vLLM keeps NemotronH's Mamba `A = -exp(A_log)` as an
// f32 parameter where trainers and checkpoints hold `A_log`: the engine
// side declares the logical tensor A_log, f32, with transform kNegExp.
enum class Transform : int32_t {
  kNone = 0,
  kNegExp = 1,    // x -> -exp(x); f32 only
  kPow2Ceil = 2,  // FP8 block scales rounded up to a power of two (UE8M0);
                  // f32 scale tensors only
  kUe8m0Requant = 3,  // FP8 block scales of a weight quantized with float
                      // scales and then requantized to power-of-two scales
                      // (vLLM's DeepGEMM path); f32 scale tensors, or u8
                      // ones holding each scale's exponent byte (DeepGEMM
                      // on SM100)
  kNvfp4Vllm = 4,  // an NVFP4 global scale (weight_scale_2) and its weights'
                   // codes and block scales as vLLM's online quantization
                   // makes them (plan/conversion.h: Nvfp4Recipe::kVllm);
                   // f32 global scale tensors only
};

// "none", "neg_exp", "pow2_ceil", "ue8m0_requant", "nvfp4_vllm".
const char* TransformName(Transform t);

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

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
           a.stacked == b.stacked && a.transform == b.transform;
  }
};

// The HF name of index `i` of a stacked tensor (name with "{}" replaced by
// i); the name itself for an unstacked one.
std::string MemberName(const TensorSpec& t, int64_t i);

// A readable name for the part `box` of t, for error messages:
// "w [0:4, 8:16]", or for a stacked tensor
// "model.layers.3.mlp.experts.{16..31}.up_proj.weight [0:2048, 0:7168]".
std::string DescribePart(const TensorSpec& t, const Box& box);

// OK if the name is non-empty, every dim >= 0, the byte size fits int64 and
// the transform is known and fits the dtype; else INVALID_ARGUMENT naming
// the tensor.
absl::Status ValidateTensorSpec(const TensorSpec& t);

// "name bf16[4096, 1024]"
std::string TensorSpecString(const TensorSpec& t);

}  // namespace refit

#endif  // REFIT_LAYOUT_TENSOR_SPEC_H_
