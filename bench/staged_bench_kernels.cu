// staged_bench's load (see staged_bench_kernels.h).
#include "bench/staged_bench_kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>

namespace refit {
namespace bench {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 256;  // K rows of W per block

// Each thread owns two columns and kRowsPerBlock rows of W; the block's
// activations sit in shared memory; partial sums are added into y.
__global__ void __launch_bounds__(kThreads)
    DecodeMatmulKernel(const uint32_t* w, int64_t k_rows, const float* x, float* y) {
  __shared__ float xs[kLoadRows][kRowsPerBlock];
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  for (int i = threadIdx.x; i < kLoadRows * kRowsPerBlock; i += kThreads) {
    const int m = i / kRowsPerBlock, k = i % kRowsPerBlock;
    xs[m][k] = k0 + k < k_rows ? x[m * k_rows + k0 + k] : 0.0f;
  }
  __syncthreads();
  const int pair = blockIdx.x * kThreads + threadIdx.x;  // columns 2 pair, 2 pair + 1
  float acc[kLoadRows][2] = {};
  const int64_t rows = min(static_cast<int64_t>(kRowsPerBlock), k_rows - k0);
#pragma unroll 8
  for (int k = 0; k < rows; ++k) {
    const uint32_t v = w[(k0 + k) * (kLoadColumns / 2) + pair];
    const float w0 = __uint_as_float(v << 16), w1 = __uint_as_float(v & 0xFFFF0000u);
#pragma unroll
    for (int m = 0; m < kLoadRows; ++m) {
      acc[m][0] += xs[m][k] * w0;
      acc[m][1] += xs[m][k] * w1;
    }
  }
#pragma unroll
  for (int m = 0; m < kLoadRows; ++m) {
    atomicAdd(&y[m * kLoadColumns + 2 * pair], acc[m][0]);
    atomicAdd(&y[m * kLoadColumns + 2 * pair + 1], acc[m][1]);
  }
}

__global__ void CountBlocksKernel(const char* a, const char* b, int64_t bytes, int unit,
                                  unsigned long long* out) {
  unsigned long long c = 0;
  const int64_t blocks = (bytes + unit - 1) / unit;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < blocks;
       i += int64_t{gridDim.x} * blockDim.x) {
    bool d = false;
    for (int64_t j = i * unit; j < min(bytes, i * unit + unit); ++j) d |= a[j] != b[j];
    c += d;
  }
  if (c > 0) atomicAdd(out, c);
}

}  // namespace

int LaunchCountChangedBlocks(const char* a, const char* b, int64_t bytes, int unit,
                             unsigned long long* out, void* stream) {
  if (bytes <= 0 || unit <= 0) return 0;
  const int64_t blocks = std::min<int64_t>((bytes / unit + kThreads - 1) / kThreads + 1, 4096);
  CountBlocksKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(a, b, bytes, unit, out);
  return static_cast<int>(cudaGetLastError());
}

int64_t DecodeMatmulK(int64_t w_bytes) { return w_bytes / (2 * kLoadColumns); }

int LaunchDecodeMatmul(const void* w, int64_t w_bytes, const float* x, float* y, void* stream) {
  const int64_t k = DecodeMatmulK(w_bytes);
  if (k <= 0) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(kLoadColumns / 2 / kThreads,
                  static_cast<unsigned>((k + kRowsPerBlock - 1) / kRowsPerBlock));
  DecodeMatmulKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(w), k, x, y);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace bench
}  // namespace refit
