// The test pattern on the GPU (plain C++ API, no CUDA or Abseil
// headers): fills or checks rows of elements with the values of
// testing/reference_copy.h's PatternWord (FiniteWord for float dtypes), so
// that a many-GB model is written and checked in milliseconds instead of
// minutes of host work.
#ifndef REFIT_TESTING_PATTERN_KERNELS_H_
#define REFIT_TESTING_PATTERN_KERNELS_H_

#include <cstdint>

namespace refit {
namespace testing {

// One innermost row of a record (testing::ForEachPatternRow): element j is
// at base + inner[j] and has linear index lin + j in its tensor.
struct PatternRow {
  char* base;            // device address of the row's byte offset
  const int64_t* inner;  // device array of `count` byte offsets
  int64_t lin;
  uint64_t name_hash;    // testing::NameHash of the tensor's name
  int32_t count;         // elements
  int32_t es;            // bytes per element, 1..8
  int32_t finite;        // FiniteWord's kind: 0 none, 1 bf16, 2 f16, 3 f32
  int32_t reserved;
};

// Fills (check = false) or checks the `n` rows of the device array `rows`
// with the pattern of version `seed`, on `stream` (a cudaStream_t). In
// check mode, wrong[0] (device) is increased by the number of wrong
// elements and wrong[1] lowered to the smallest (row << 32 | element) of a
// wrong one (start it at ~0). Returns the launch's cudaError_t as an int.
int LaunchPatternRows(const PatternRow* rows, int64_t n, uint64_t seed, bool check,
                      unsigned long long* wrong, void* stream);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_PATTERN_KERNELS_H_
