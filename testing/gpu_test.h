// What refit's GPU tests share: whether a CUDA device is there, the skip
// that passes (printing REFIT_GPU_SKIP, which tools/test counts) where it is
// not, copies of host vectors to and from device memory (and device copies
// freed together), the best time of a few runs of a stream's work, and
// BF16 weights as a trained model has them.
#ifndef REFIT_TESTING_GPU_TEST_H_
#define REFIT_TESTING_GPU_TEST_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace testing {

// n BF16 values (bit patterns) drawn from N(0, 0.02), as a trained
// model's weights are distributed; the same for the same seed.
inline std::vector<uint16_t> TrainedBf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> out(n);
  for (uint16_t& h : out) {
    const float x = normal(rng);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    h = static_cast<uint16_t>(b >> 16);
  }
  return out;
}

// True when the CUDA runtime sees at least one device.
inline bool HaveCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A device copy of `v` (one spare byte, so empty vectors allocate too);
// the caller frees it with cudaFree.
template <typename T>
char* ToDevice(const std::vector<T>& v) {
  char* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), v.size() * sizeof(T) + 1), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

// The first `n` elements at device address `d`.
template <typename T>
std::vector<T> FromDevice(const char* d, int64_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Device copies of host buffers (`bytes` + 16 spare bytes each; zeroed when
// `host` is null), freed with the object.
struct DeviceCopies {
  std::vector<char*> ptrs;
  DeviceCopies() = default;
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;
  ~DeviceCopies() {
    for (char* p : ptrs) cudaFree(p);
  }
  char* Add(const void* host, int64_t bytes) {
    char* d = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), bytes + 16), cudaSuccess);
    if (host != nullptr) {
      EXPECT_EQ(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      EXPECT_EQ(cudaMemset(d, 0, bytes), cudaSuccess);
    }
    ptrs.push_back(d);
    return d;
  }
};

// The least time in ms, over `runs` runs after one warm-up, that `fn` (work
// enqueued on the default stream) takes between two events on that stream.
template <typename Fn>
float BestMs(Fn&& fn, int runs = 5) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int it = 0; it <= runs; ++it) {
    float ms = 0;
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    if (it > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace testing
}  // namespace refit

// Ends the test as skipped (it passes) when there is no CUDA device, after
// printing "SKIP <name>: no CUDA device (REFIT_GPU_SKIP)".
#define REFIT_SKIP_WITHOUT_GPU(name)                                      \
  do {                                                                    \
    if (!::refit::testing::HaveCudaDevice()) {                            \
      std::printf("SKIP " name ": no CUDA device (REFIT_GPU_SKIP)\n");    \
      GTEST_SKIP() << "no CUDA device";                                   \
    }                                                                     \
  } while (0)

#endif  // REFIT_TESTING_GPU_TEST_H_
