// Kernels of delta_bench: synthetic BF16 weights, the changes between two
// versions (at random positions, or an AdamW-like step), and a byte
// count of differences. Plain C++ API (no CUDA headers); each returns the launch's
// cudaError_t as an int.
#ifndef REFIT_BENCH_DELTA_BENCH_KERNELS_H_
#define REFIT_BENCH_DELTA_BENCH_KERNELS_H_

#include <cstdint>

namespace refit {
namespace bench {

// w[i] = bf16 of a normal(0, 0.02) draw keyed by (seed, i).
int LaunchFillWeights(uint16_t* w, int64_t n, uint64_t seed, void* stream);

// Changes about `fraction` of the n BF16 words (chosen by a hash of seed
// and index) to another finite value (low mantissa bits flipped).
int LaunchRandomChange(uint16_t* w, int64_t n, double fraction, uint64_t seed, void* stream);

// One AdamW step at its first iteration (update = lr * sign(g), g's sign a
// hash of seed and index; decoupled weight decay 0.1) in f32, rounded back
// to BF16: only weights whose BF16 rounding step is below the update change.
int LaunchAdamStep(uint16_t* w, int64_t n, float lr, uint64_t seed, void* stream);

// *out += the number of bytes in which a and b (device, n bytes) differ.
int LaunchCountDiff(const uint8_t* a, const uint8_t* b, int64_t n, unsigned long long* out,
                    void* stream);

}  // namespace bench
}  // namespace refit

#endif  // REFIT_BENCH_DELTA_BENCH_KERNELS_H_
