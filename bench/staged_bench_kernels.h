// staged_bench's kernels: its load (a decode-shaped matmul over an
// engine's weights) and a count of changed blocks.
// Plain C++ API (no CUDA headers); returns the launch's cudaError_t as an
// int.
#ifndef REFIT_BENCH_STAGED_BENCH_KERNELS_H_
#define REFIT_BENCH_STAGED_BENCH_KERNELS_H_

#include <cstdint>

namespace refit {
namespace bench {

// Rows of the activations (tokens in one decode step).
inline constexpr int kLoadRows = 8;
// Columns of the weight matrix.
inline constexpr int kLoadColumns = 4096;

// y (kLoadRows x kLoadColumns f32) += x (kLoadRows x K f32) * W (K x
// kLoadColumns BF16, row-major: the first K * kLoadColumns * 2 of `w_bytes`
// bytes at `w`), on `stream`.
int LaunchDecodeMatmul(const void* w, int64_t w_bytes, const float* x, float* y, void* stream);

// *out += the blocks of `unit` bytes of [a, a + bytes) (from a) in which
// a and b differ, on `stream`.
int LaunchCountChangedBlocks(const char* a, const char* b, int64_t bytes, int unit,
                             unsigned long long* out, void* stream);

// The K of LaunchDecodeMatmul for `w_bytes` of weights (x holds
// kLoadRows * K floats).
int64_t DecodeMatmulK(int64_t w_bytes);

}  // namespace bench
}  // namespace refit

#endif  // REFIT_BENCH_STAGED_BENCH_KERNELS_H_
