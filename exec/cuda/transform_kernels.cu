// CUDA kernel: x -> -exp(x) in place (see transform_kernels.h).
#include "exec/cuda/transform_kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace refit {
namespace cuda {

// Kept out of an anonymous namespace: nvcc hashes the source path into the
// mangling of those, which breaks reproducible objects.
__device__ float RefitNegExpF(float x) {
  // exp in double (<= 1 ulp of double), then one rounding to float: the
  // host (std::exp on double) gives the same float except when the double
  // value lies within 2 double ulps of a float rounding boundary.
  return __double2float_rn(-exp(static_cast<double>(x)));
}

// Round to nearest even to bf16, NaN kept quiet (as transform.cc does).
__device__ unsigned short RefitFloatToBf16(float y) {
  unsigned int u = __float_as_uint(y);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<unsigned short>((u >> 16) | 0x40u);
  }
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<unsigned short>(u >> 16);
}

__global__ void RefitNegExpKernel(char* p, int64_t n, int dtype) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += step) {
    if (dtype == kTransformF32) {
      float* f = reinterpret_cast<float*>(p);
      f[i] = RefitNegExpF(f[i]);
    } else if (dtype == kTransformBF16) {
      unsigned short* h = reinterpret_cast<unsigned short*>(p);
      const float x = __uint_as_float(static_cast<unsigned int>(h[i]) << 16);
      h[i] = RefitFloatToBf16(RefitNegExpF(x));
    } else {
      unsigned short* h = reinterpret_cast<unsigned short*>(p);
      const float y = RefitNegExpF(__half2float(__ushort_as_half(h[i])));
      h[i] = __half_as_ushort(__float2half_rn(y));
    }
  }
}

int LaunchNegExp(char* p, int64_t n, int dtype, void* stream) {
  if (dtype != kTransformF32 && dtype != kTransformBF16 &&
      dtype != kTransformF16) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (n <= 0) return 0;
  const int64_t blocks = (n + 255) / 256;
  RefitNegExpKernel<<<static_cast<int>(blocks < 1024 ? blocks : 1024), 256, 0,
                      static_cast<cudaStream_t>(stream)>>>(p, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
