// NVFP4 quantize-on-pull items (exec/pull/fused_pull.h, format kNvfp4) resolved to
// device addresses for the kernel of pull_nvfp4_kernels.h.
#ifndef REFIT_EXEC_PULL_CUDA_PULL_NVFP4_ITEMS_H_
#define REFIT_EXEC_PULL_CUDA_PULL_NVFP4_ITEMS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/pull/cuda/pull_nvfp4_kernels.h"
#include "exec/pull/fused_pull.h"

namespace refit {

// Whether a FusedItem is NVFP4's (LaunchPullNvfp4 runs it, not
// LaunchPullQuantize).
bool IsNvfp4Item(const FusedItem& item);

// The device items of `items` (every one IsNvfp4Item): src.at(rank)[b] is
// the address sender `rank`'s buffer b (a slice.src index) is mapped at
// here, dst[b] this receiver's buffer b. INVALID_ARGUMENT naming the
// buffer when an address is missing or the item is not NVFP4's.
absl::StatusOr<std::vector<cuda::PullNvfp4Item>> ResolveNvfp4Items(
    absl::Span<const FusedItem> items, const std::map<int32_t, std::vector<char*>>& src,
    absl::Span<char* const> dst);

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_NVFP4_ITEMS_H_
