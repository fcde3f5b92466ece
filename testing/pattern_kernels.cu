// The test pattern on the GPU (see pattern_kernels.h). PatternWord and
// FiniteWord are testing/reference_copy.cc's and reference_convert.cc's,
// bit for bit (colocated_bench checks a sample against them on the host).
#include "testing/pattern_kernels.h"

#include <cuda_runtime.h>

namespace refit {
namespace testing {

__device__ uint64_t DevicePatternWord(uint64_t name_hash, int64_t index, uint64_t seed) {
  uint64_t x = name_hash ^ (seed * 0xD6E8FEB86659FD93ULL) ^
               (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 29;
  return x;
}

__device__ uint64_t DeviceFiniteWord(int32_t kind, uint64_t w) {
  switch (kind) {
    case 1:
      return (w & 0x7F80) == 0x7F80 ? w & ~uint64_t{0x4000} : w;
    case 2:
      return (w & 0x7C00) == 0x7C00 ? w & ~uint64_t{0x4000} : w;
    case 3:
      return (w & 0x7F800000) == 0x7F800000 ? w & ~uint64_t{0x40000000} : w;
    default:
      return w;
  }
}

__global__ void PatternRowsKernel(const PatternRow* rows, int64_t n, uint64_t seed, bool check,
                                  unsigned long long* wrong) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const PatternRow row = rows[r];
    for (int32_t j = threadIdx.x; j < row.count; j += blockDim.x) {
      const uint64_t w =
          DeviceFiniteWord(row.finite, DevicePatternWord(row.name_hash, row.lin + j, seed));
      char* p = row.base + row.inner[j];
      if (!check) {
        for (int32_t k = 0; k < row.es; ++k) p[k] = static_cast<char>(w >> (8 * k));
        continue;
      }
      bool ok = true;
      for (int32_t k = 0; k < row.es; ++k) {
        ok = ok && static_cast<unsigned char>(p[k]) == static_cast<unsigned char>(w >> (8 * k));
      }
      if (!ok) {
        atomicAdd(&wrong[0], 1ULL);
        atomicMin(&wrong[1], (static_cast<unsigned long long>(r) << 32) |
                                 static_cast<unsigned long long>(j));
      }
    }
  }
}

int LaunchPatternRows(const PatternRow* rows, int64_t n, uint64_t seed, bool check,
                      unsigned long long* wrong, void* stream) {
  if (n <= 0) return 0;
  const int blocks = n < 65536 ? static_cast<int>(n) : 65536;
  PatternRowsKernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(rows, n, seed, check,
                                                                          wrong);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace testing
}  // namespace refit
