// staged_bench's replay kernels (see staged_replay_kernels.h).
#include "bench/staged_replay_kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cub/block/block_scan.cuh>

namespace refit {
namespace bench {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;                             // words a thread reads per step
constexpr int kStepWords = kThreads * kPerThread;         // 2048
constexpr int kScatterPer = 8;                            // elements a lane scatters per step

__device__ __forceinline__ uint32_t Differs(const uint16_t* a, const uint16_t* b, int64_t at,
                                            int64_t words) {
  uint32_t bits = 0;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = at + k;
    if (i < words && a[i] != b[i]) bits |= 1u << k;
  }
  return bits;
}

__global__ void __launch_bounds__(kThreads)
    CountKernel(const uint16_t* a, const uint16_t* b, int64_t words, int32_t* counts) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kReplayChunkWords;
  const int64_t end = min(words, c0 + kReplayChunkWords);
  int n = 0;
  for (int64_t s = c0; s < end; s += kStepWords) {
    n += __popc(Differs(a, b, s + threadIdx.x * kPerThread, end));
  }
  if (n > 0) atomicAdd(&total, n);
  __syncthreads();
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    PackKernel(const uint16_t* a, const uint16_t* b, int64_t words, const int64_t* offsets,
               uint64_t global_base, uint32_t* pos, uint32_t* global, uint16_t* val) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kReplayChunkWords;
  const int64_t end = min(words, c0 + kReplayChunkWords);
  int64_t out = offsets[blockIdx.x];
  for (int64_t s = c0; s < end; s += kStepWords) {
    const int64_t at = s + threadIdx.x * kPerThread;
    uint32_t bits = Differs(a, b, at, end);
    int first = 0, step = 0;
    Scan(temp).ExclusiveSum(__popc(bits), first, step);
    int64_t k = out + first;
    for (; bits != 0; bits &= bits - 1, ++k) {
      const int64_t i = at + __ffs(bits) - 1;
      pos[k] = static_cast<uint32_t>(i);
      global[k] = static_cast<uint32_t>(global_base + static_cast<uint64_t>(i));
      val[k] = a[i];
    }
    out += step;
    __syncthreads();  // temp is reused
  }
}

// A warp takes 32 * kScatterPer consecutive elements (a persistent grid
// stepping over them): all positions and values are loaded first (coalesced),
// then the writes; consecutive lanes write consecutive changed elements.
__global__ void __launch_bounds__(kThreads)
    ReplayKernel(const ReplayMessage* messages, int32_t num_messages, const uint32_t* pos,
                 const uint16_t* val, int64_t total) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  constexpr int64_t kSpan = 32 * kScatterPer;
  for (int64_t c = warp * kSpan; c < total; c += warps * kSpan) {
    uint32_t p[kScatterPer];
    uint16_t v[kScatterPer];
#pragma unroll
    for (int j = 0; j < kScatterPer; ++j) {
      const int64_t e = c + j * 32 + lane;
      if (e < total) {
        p[j] = __ldcs(pos + e);
        v[j] = __ldcs(reinterpret_cast<const unsigned short*>(val) + e);
      }
    }
    // The message of the lane's first element, then forward.
    int lo = 0, hi = num_messages - 1;
    const int64_t e0 = c + lane;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (messages[mid].first <= e0) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
#pragma unroll
    for (int j = 0; j < kScatterPer; ++j) {
      const int64_t e = c + j * 32 + lane;
      if (e >= total) break;
      while (lo + 1 < num_messages && messages[lo + 1].first <= e) ++lo;
      reinterpret_cast<uint16_t*>(messages[lo].dst)[p[j]] = v[j];
    }
  }
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void RowChangeKernel(uint16_t* w, int64_t n, int64_t row_words, uint64_t threshold,
                                uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (Mix(seed ^ Mix(static_cast<uint64_t>(i / row_words))) < threshold) w[i] ^= 1;
  }
}

int64_t Chunks(int64_t words) { return (words + kReplayChunkWords - 1) / kReplayChunkWords; }

}  // namespace

int ReplayBlocks() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    sms = 132;
  }
  return sms * (2048 / kThreads);
}

int LaunchCountChangedWords(const uint16_t* a, const uint16_t* b, int64_t words, int32_t* counts,
                            void* stream) {
  if (words <= 0) return 0;
  CountKernel<<<static_cast<unsigned>(Chunks(words)), kThreads, 0,
                static_cast<cudaStream_t>(stream)>>>(a, b, words, counts);
  return static_cast<int>(cudaGetLastError());
}

int LaunchPackChangedWords(const uint16_t* a, const uint16_t* b, int64_t words,
                           const int64_t* offsets, uint64_t global_base, uint32_t* pos,
                           uint32_t* global, uint16_t* val, void* stream) {
  if (words <= 0) return 0;
  PackKernel<<<static_cast<unsigned>(Chunks(words)), kThreads, 0,
               static_cast<cudaStream_t>(stream)>>>(a, b, words, offsets, global_base, pos,
                                                    global, val);
  return static_cast<int>(cudaGetLastError());
}

int LaunchReplayScatter(const ReplayMessage* messages, int32_t num_messages, const uint32_t* pos,
                        const uint16_t* val, int64_t total, int blocks, void* stream) {
  if (total <= 0 || num_messages <= 0) return 0;
  ReplayKernel<<<static_cast<unsigned>(std::max(blocks, 1)), kThreads, 0,
                 static_cast<cudaStream_t>(stream)>>>(messages, num_messages, pos, val, total);
  return static_cast<int>(cudaGetLastError());
}

int LaunchRowChange(uint16_t* w, int64_t n, int64_t row_words, double fraction, uint64_t seed,
                    void* stream) {
  if (n <= 0 || row_words <= 0) return 0;
  const double f = fraction < 0 ? 0 : fraction > 1 ? 1 : fraction;
  const uint64_t threshold =
      f >= 1 ? ~uint64_t{0} : static_cast<uint64_t>(f * 18446744073709551616.0);
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  RowChangeKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(w, n, row_words, threshold, seed);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace bench
}  // namespace refit
