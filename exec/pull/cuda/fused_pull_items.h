// Quantize-on-pull items (exec/pull/fused_pull.h) resolved to device addresses
// for the kernel of exec/convert/cuda/convert_kernels.h (LaunchPullQuantize).
#ifndef REFIT_EXEC_PULL_CUDA_FUSED_PULL_ITEMS_H_
#define REFIT_EXEC_PULL_CUDA_FUSED_PULL_ITEMS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/convert/cuda/pull_quantize_kernels.h"
#include "exec/pull/fused_pull.h"

namespace refit {

// The device items of `items`: src.at(rank)[b] is the address sender
// `rank`'s buffer b (a slice.src index) is mapped at here, dst[b] this
// receiver's buffer b. INVALID_ARGUMENT naming the buffer when an address
// is missing.
absl::StatusOr<std::vector<cuda::PullQuantItem>> ResolveFusedItems(
    absl::Span<const FusedItem> items, const std::map<int32_t, std::vector<char*>>& src,
    absl::Span<char* const> dst);

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_FUSED_PULL_ITEMS_H_
