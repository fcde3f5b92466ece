// TensorSpec: a logical tensor, named by its HF checkpoint name
// (e.g. "model.layers.3.mlp.experts.17.gate_proj.weight"), with its global
// shape and dtype. Quantization scales are logical tensors of their own.
#ifndef REFIT_RESHARD_TENSOR_SPEC_H_
#define REFIT_RESHARD_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "reshard/dtype.h"

namespace refit {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype;
  }
};

// OK if the name is non-empty, every dim >= 0 and the byte size fits int64;
// else INVALID_ARGUMENT naming the tensor.
absl::Status ValidateTensorSpec(const TensorSpec& t);

// "name bf16[4096, 1024]"
std::string TensorSpecString(const TensorSpec& t);

}  // namespace refit

#endif  // REFIT_RESHARD_TENSOR_SPEC_H_
