// The test pattern of testing/reference_copy.h filled and checked in device
// memory by the GPU (pattern_kernels.h), so that a many-GB model is written
// and checked in milliseconds: for the benchmarks and the demo's GPU
// members (testing/reference_copy.h is the definition).
#ifndef REFIT_TESTING_GPU_PATTERN_H_
#define REFIT_TESTING_GPU_PATTERN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "layout/layout.h"

namespace refit::testing {

// Fills (check = false) or checks every element of `rank`'s records of
// `side` (testing/reference_copy.h: PatternWord of version `seed`), with
// `buffers` the device addresses of the side's buffers (indexed like
// side.buffers; null for other ranks'), on the current device, one kernel
// per million rows. Plain copies only: a record whose engine dtype differs
// from the trainer's is checked as if it were not converted. Returns
// INTERNAL naming the first wrong element (tensor, linear index, buffer,
// byte) and how many are wrong, or with a CUDA error.
absl::Status DevicePattern(const SideLayout& side, int rank, const std::vector<char*>& buffers,
                           uint64_t seed, bool check);

}  // namespace refit::testing

#endif  // REFIT_TESTING_GPU_PATTERN_H_
