// Kernels of delta_bench (see delta_bench_kernels.h).
#include "bench/delta_bench_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace refit {
namespace bench {

__device__ uint64_t BenchHash(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL ^ (i + 0x632BE59BD9B4E019ULL);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

__device__ uint16_t ToBf16(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t*>(&b);
}

__device__ float FromBf16(uint16_t u) {
  return __uint_as_float(static_cast<uint32_t>(u) << 16);
}

__global__ void FillWeightsKernel(uint16_t* w, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = BenchHash(seed, i);
    const float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);
    const float u2 = (h & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    w[i] = ToBf16(0.02f * z);
  }
}

__global__ void RandomChangeKernel(uint16_t* w, int64_t n, uint64_t threshold, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = BenchHash(seed, i);
    if (h < threshold) w[i] ^= static_cast<uint16_t>(1 + (h >> 57));  // 1..128: low mantissa
  }
}

__global__ void AdamStepKernel(uint16_t* w, int64_t n, float lr, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = FromBf16(w[i]);
    const float g = (BenchHash(seed, i) & 1) ? 1.0f : -1.0f;
    w[i] = ToBf16(x - lr * g - lr * 0.1f * x);
  }
}

__global__ void CountDiffKernel(const uint8_t* a, const uint8_t* b, int64_t n,
                                unsigned long long* out) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    c += a[i] != b[i];
  }
  if (c > 0) atomicAdd(out, c);
}

namespace {
constexpr int kThreads = 256;
int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 8192 ? (b > 0 ? b : 1) : 8192);
}
}  // namespace

int LaunchFillWeights(uint16_t* w, int64_t n, uint64_t seed, void* stream) {
  FillWeightsKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(w, n, seed);
  return static_cast<int>(cudaGetLastError());
}

int LaunchRandomChange(uint16_t* w, int64_t n, double fraction, uint64_t seed, void* stream) {
  const double f = fraction < 0 ? 0 : fraction > 1 ? 1 : fraction;
  const uint64_t threshold =
      f >= 1 ? ~uint64_t{0} : static_cast<uint64_t>(f * 18446744073709551616.0);
  RandomChangeKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      w, n, threshold, seed);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAdamStep(uint16_t* w, int64_t n, float lr, uint64_t seed, void* stream) {
  AdamStepKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(w, n, lr, seed);
  return static_cast<int>(cudaGetLastError());
}

int LaunchCountDiff(const uint8_t* a, const uint8_t* b, int64_t n, unsigned long long* out,
                    void* stream) {
  CountDiffKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, b, n, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace bench
}  // namespace refit
