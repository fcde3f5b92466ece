#include "exec/convert/cuda/nvfp4_vllm_kernels.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "exec/convert/nvfp4_vllm_math.h"

namespace refit::cuda {

// Kept out of an anonymous namespace (reproducible objects).

// One thread a 16-block: the block's amax, e4m3 scale, output scale and
// codes (exec/convert/nvfp4_vllm_math.h).
__global__ void RefitNvfp4VllmQuantizeKernel(const uint4* in, int64_t blocks, float g,
                                             uint2* codes, uint8_t* scales) {
  const float rcp6 = Nvfp4VllmRcp(6.0f), rcp_g = Nvfp4VllmRcp(g);
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 lo = in[2 * b], hi = in[2 * b + 1];
    const unsigned int w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    float x[16];
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      v = fmaxf(v, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));
    }
    const __nv_fp8_storage_t sb =
        __nv_cvt_float_to_fp8(Nvfp4VllmBlockScale(v, g, rcp6), __NV_SATFINITE, __NV_E4M3);
    const float sv = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
    const float o = sv != 0.0f ? Nvfp4VllmRcp(Nvfp4VllmOutputDivisor(sv, rcp_g)) : 0.0f;
    unsigned int packed[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i) packed[i / 8] |= Nvfp4VllmCode(x[i], o) << (4 * (i % 8));
    codes[b] = make_uint2(packed[0], packed[1]);
    scales[b] = sb;
  }
}

__device__ __forceinline__ float RefitVllmLoad(const char* data, int dtype, int64_t k) {
  if (dtype == kConvertBF16) {
    return __uint_as_float(static_cast<unsigned int>(reinterpret_cast<const uint16_t*>(data)[k])
                           << 16);
  }
  if (dtype == kConvertF16) {
    return __half2float(reinterpret_cast<const __half*>(data)[k]);
  }
  return reinterpret_cast<const float*>(data)[k];
}

// One thread a (leading index, row, intersecting 16-block) of the box: the
// block's part inside the box coded with the block's amax (its own, or
// the exchanged one of a cut block), its scale byte where the box owns it.
__global__ void RefitNvfp4VllmBoxKernel(DenseBox b, const float* block_amax,
                                        const float* sf_scale, uint8_t* out, uint8_t* scales) {
  const int64_t first = b.c0 / 16;
  const int64_t tiles = b.C == 0 ? 0 : (b.c0 + b.C + 15) / 16 - first;
  const int64_t owned0 = (b.c0 + 15) / 16;
  const int64_t owned = first + tiles > owned0 ? first + tiles - owned0 : 0;
  const int64_t n = b.L * b.R * tiles;
  const float rcp6 = Nvfp4VllmRcp(6.0f);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = k % tiles, row = k / tiles, l = row / b.R;
    const float g = sf_scale[l];
    const int64_t lo = (first + t) * 16 - b.c0, hi = (first + t + 1) * 16 - b.c0;
    const int64_t b0 = lo > 0 ? lo : 0, b1 = hi < b.C ? hi : b.C;
    float x[16];
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      x[i] = b0 + i < b1 ? RefitVllmLoad(b.data, b.dtype, row * b.C + b0 + i) : 0.0f;
      v = fmaxf(v, fabsf(x[i]));
    }
    if (block_amax != nullptr) v = block_amax[k];
    const __nv_fp8_storage_t sb =
        __nv_cvt_float_to_fp8(Nvfp4VllmBlockScale(v, g, rcp6), __NV_SATFINITE, __NV_E4M3);
    const float sv = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
    const float o =
        sv != 0.0f ? Nvfp4VllmRcp(Nvfp4VllmOutputDivisor(sv, Nvfp4VllmRcp(g))) : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      if (b0 + i < b1) {
        out[row * (b.C / 2) + (b0 + i) / 2] =
            static_cast<uint8_t>(Nvfp4VllmCode(x[i], o) | Nvfp4VllmCode(x[i + 1], o) << 4);
      }
    }
    if (scales != nullptr && first + t >= owned0) scales[row * owned + first + t - owned0] = sb;
  }
}

__global__ void RefitRcpApproxKernel(const float* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Nvfp4VllmRcp(in[i]);
  }
}

namespace {

int Grid(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return static_cast<int>(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

}  // namespace

cudaError_t LaunchNvfp4VllmQuantize(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                                    uint8_t* scales, cudaStream_t stream) {
  if (blocks <= 0) return cudaSuccess;
  RefitNvfp4VllmQuantizeKernel<<<Grid(blocks, 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(in), blocks, g, reinterpret_cast<uint2*>(codes), scales);
  return cudaGetLastError();
}

cudaError_t LaunchNvfp4VllmQuantizeBox(const DenseBox& b, const float* block_amax,
                                       const float* sf_scale, uint8_t* out, uint8_t* scales,
                                       cudaStream_t stream) {
  const int64_t tiles = b.C == 0 ? 0 : (b.c0 + b.C + 15) / 16 - b.c0 / 16;
  const int64_t n = b.L * b.R * tiles;
  if (n <= 0) return cudaSuccess;
  RefitNvfp4VllmBoxKernel<<<Grid(n, 256), 256, 0, stream>>>(b, block_amax, sf_scale, out,
                                                             scales);
  return cudaGetLastError();
}

cudaError_t LaunchRcpApprox(const float* in, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  RefitRcpApproxKernel<<<Grid(n, 256), 256, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

}  // namespace refit::cuda
