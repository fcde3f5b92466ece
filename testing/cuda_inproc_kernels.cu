// The in-process device transport's gate kernel.
#include <cuda_runtime.h>

#include "testing/cuda_inproc_kernels.h"

namespace refit {
namespace testing {
namespace {

__global__ void WaitFlagsKernel(const volatile int32_t* flags, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    while (flags[i] == 0) __nanosleep(2000);
  }
  __threadfence_system();  // later work of the stream reads after the flags
}

}  // namespace

int LaunchWaitFlags(const int32_t* flags, int32_t n, void* stream) {
  if (n <= 0) return static_cast<int>(cudaSuccess);
  WaitFlagsKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flags, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace testing
}  // namespace refit
