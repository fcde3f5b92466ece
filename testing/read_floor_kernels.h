// The read floor of a compare: two device buffers read once, nothing
// written but one count. Benchmarks and GPU tests print an encoder's read
// rate next to it (the most a kernel that must read both can reach).
// Plain C++ API (no CUDA headers).
#ifndef REFIT_TESTING_READ_FLOOR_KERNELS_H_
#define REFIT_TESTING_READ_FLOOR_KERNELS_H_

#include <cstdint>

namespace refit {
namespace testing {

// *out += the number of 16-byte chunks in which a and b (device, 16-byte
// aligned, n bytes: a multiple of 16) differ: 16-byte streaming loads, four
// in flight per array and thread, a grid of 8 blocks per SM. Returns the
// launch's cudaError_t as an int.
int LaunchCompareChunks(const uint8_t* a, const uint8_t* b, int64_t n, unsigned long long* out,
                        void* stream);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_READ_FLOOR_KERNELS_H_
