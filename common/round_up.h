// RoundUp: an integer rounded up to a multiple.
#ifndef REFIT_COMMON_ROUND_UP_H_
#define REFIT_COMMON_ROUND_UP_H_

#include <cstdint>

namespace refit {

// Returns the least multiple of `m` (> 0) at or above `v` (>= 0).
inline constexpr int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace refit

#endif  // REFIT_COMMON_ROUND_UP_H_
