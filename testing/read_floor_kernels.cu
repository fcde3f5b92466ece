// The read floor of a compare (see read_floor_kernels.h).
#include "testing/read_floor_kernels.h"

#include <cuda_runtime_api.h>

namespace refit {
namespace testing {

__global__ void CompareChunksKernel(const uint4* a, const uint4* b, int64_t n16,
                                    unsigned long long* out) {
  unsigned long long c = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 x[4], y[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      x[u] = __ldcs(a + i + u * stride);
      y[u] = __ldcs(b + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      c += (x[u].x != y[u].x) | (x[u].y != y[u].y) | (x[u].z != y[u].z) | (x[u].w != y[u].w);
    }
  }
  for (; i < n16; i += stride) {
    const uint4 x = a[i], y = b[i];
    c += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (c > 0) atomicAdd(out, c);
}

int LaunchCompareChunks(const uint8_t* a, const uint8_t* b, int64_t n, unsigned long long* out,
                        void* stream) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  CompareChunksKernel<<<sms * 8, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b), n / 16, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace testing
}  // namespace refit
