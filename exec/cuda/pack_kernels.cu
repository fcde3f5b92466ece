// CUDA kernels: strided 2-D byte copies (pack into / unpack from staging).
#include "exec/cuda/pack_kernels.h"

#include <cuda_runtime.h>

namespace refit {
namespace cuda {
namespace {

__global__ void CopyKernel(const ResolvedCopy* tasks, int n) {
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    const ResolvedCopy c = tasks[t];
    const bool wide =
        ((reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) |
          static_cast<uintptr_t>(c.row_bytes) |
          static_cast<uintptr_t>(c.src_row_stride) |
          static_cast<uintptr_t>(c.dst_row_stride)) & 15) == 0;
    const int64_t unit = wide ? 16 : 1;
    const int64_t per_row = c.row_bytes / unit;
    const int64_t total = per_row * c.rows;
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < total; i += step) {
      const int64_t row = i / per_row;
      const int64_t col = (i - row * per_row) * unit;
      const char* s = c.src + row * c.src_row_stride + col;
      char* d = c.dst + row * c.dst_row_stride + col;
      if (wide) {
        *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s);
      } else {
        *d = *s;
      }
    }
  }
}

}  // namespace

int LaunchCopies(const ResolvedCopy* tasks, int n, void* stream) {
  if (n <= 0) return 0;
  const int gx = n >= 2048 ? 1 : (2048 / n < 264 ? 2048 / n : 264);
  dim3 grid(gx, n < 65535 ? n : 65535);
  CopyKernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(tasks, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace refit
