// CUDA kernel for destination-side element-wise transforms
// (TensorSpec::transform; the host version and the value contract are in
// exec/transform.h). Plain C++ API, no CUDA or Abseil headers.
#ifndef REFIT_EXEC_CUDA_TRANSFORM_KERNELS_H_
#define REFIT_EXEC_CUDA_TRANSFORM_KERNELS_H_

#include <cstdint>

namespace refit {
namespace cuda {

// Element dtypes of LaunchNegExp.
inline constexpr int kTransformF32 = 0;
inline constexpr int kTransformBF16 = 1;
inline constexpr int kTransformF16 = 2;

// Enqueues x -> -exp(x) in place over n elements of `dtype` (a kTransform*
// value) at device address p on `stream` (a cudaStream_t). Computed as the
// host does (ApplyTransformHost): exp in double, rounded to nearest even to
// the element type, so host and device agree within 1 ulp of the element
// type. Returns the cudaError_t of the launch as an int (0 = success;
// cudaErrorInvalidValue for an unknown dtype code).
int LaunchNegExp(char* p, int64_t n, int dtype, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CUDA_TRANSFORM_KERNELS_H_
