// Destination-side element-wise transforms (TensorSpec::transform), applied
// in place to the bytes a refit just wrote: vLLM keeps NemotronH's Mamba
// `A = -exp(A_log)` where trainers and checkpoints hold `A_log`.
//
// Values: the element widens to float, -exp is computed in double and
// rounded to nearest even to float, then (bf16, fp16) to nearest even to the
// element type; NaN stays NaN, overflow gives -inf. The CUDA kernel
// (transform_kernels.h, LaunchNegExp) computes the same way with the
// device's double exp (<= 1 ulp of double, like glibc's), so host and device
// agree within 1 ulp of the element type (TransformMatches); they differ
// only where the double result lies next to a rounding boundary.
#ifndef REFIT_EXEC_TRANSFORM_H_
#define REFIT_EXEC_TRANSFORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "layout/dtype.h"
#include "layout/layout.h"
#include "layout/tensor_spec.h"

namespace refit {

// `elements` contiguous elements of `dtype` at byte `offset` of `buffer`
// (an index into the side's buffers) to transform with `transform`.
struct TransformRun {
  Transform transform = Transform::kNone;
  DType dtype = DType::kF32;
  int32_t buffer = 0;
  int64_t offset = 0;
  int64_t elements = 0;
};

// The runs covering every element of rank `rank`'s records (rank < 0: all
// ranks) whose tensor has a transform, merged where contiguous. Empty when
// no tensor of `side` has one.
std::vector<TransformRun> TransformRuns(const SideLayout& side, int32_t rank);

// Applies `t` to `elements` elements of `dtype` at host address p.
// INVALID_ARGUMENT for a dtype the transform does not take.
absl::Status ApplyTransformHost(Transform t, DType dtype, char* p,
                                int64_t elements);

// Applies every run to host buffers (indexed like the side's buffers).
// INVALID_ARGUMENT if a run's buffer is missing.
absl::Status ApplyTransformRunsHost(absl::Span<const TransformRun> runs,
                                    absl::Span<char* const> buffers);

// The transformed value of one element (its raw bytes in, raw bytes out),
// as the host computes it; 2- or 4-byte dtypes.
uint32_t TransformElement(Transform t, DType dtype, uint32_t bits);

// True if `got` is within the documented tolerance of `want` (raw element
// bits of `dtype`): equal bits, both NaN, or at most 1 ulp apart with the
// same sign.
bool TransformMatches(DType dtype, uint32_t want, uint32_t got);

}  // namespace refit

#endif  // REFIT_EXEC_TRANSFORM_H_
