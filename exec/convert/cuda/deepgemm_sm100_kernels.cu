// DeepGEMM's SM100 packed UE8M0 scales (deepgemm_sm100_kernels.h).
#include "exec/convert/cuda/deepgemm_sm100_kernels.h"

namespace refit::cuda {

namespace {

// int32 i of the output: expert e = i / (packed_k * aligned_n), then
// (j, r) = the [packed_k, aligned_n] position; byte b is tile column 4j + b
// of row r's tile row (zero past the row's columns or past n).
__global__ void PackDeepgemmSm100Kernel(const float* tiles, int64_t total, int64_t n,
                                        int64_t sf_k, int64_t packed_k, int64_t aligned_n,
                                        uint32_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int64_t per = packed_k * aligned_n;
  const int64_t e = i / per, j = (i % per) / aligned_n, r = (i % per) % aligned_n;
  uint32_t word = 0;
  if (r < n) {
    const float* row = tiles + (e * ((n + 127) / 128) + r / 128) * sf_k;
    for (int b = 0; b < 4; ++b) {
      const int64_t c = 4 * j + b;
      if (c < sf_k) word |= ((__float_as_uint(row[c]) >> 23) & 0xFFu) << (8 * b);
    }
  }
  out[i] = word;
}

}  // namespace

cudaError_t LaunchPackDeepgemmSm100Scales(const float* tile_scales, int64_t experts, int64_t n,
                                          int64_t k, uint8_t* out, cudaStream_t stream) {
  const int64_t sf_k = (k + 127) / 128, packed_k = (sf_k + 3) / 4, aligned_n = (n + 3) / 4 * 4;
  const int64_t total = experts * packed_k * aligned_n;
  if (total <= 0) return cudaSuccess;
  const int threads = 256;
  const auto blocks = static_cast<unsigned int>((total + threads - 1) / threads);
  PackDeepgemmSm100Kernel<<<blocks, threads, 0, stream>>>(
      tile_scales, total, n, sf_k, packed_k, aligned_n, reinterpret_cast<uint32_t*>(out));
  return cudaGetLastError();
}

}  // namespace refit::cuda
