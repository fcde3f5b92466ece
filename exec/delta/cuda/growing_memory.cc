// GrowingMemory (see growing_memory.h).
#include "exec/delta/cuda/growing_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"

namespace refit {

void GrowingMemory::Release() {
  if (p == nullptr) return;
  if (pinned) {
    cudaFreeHost(p);
  } else {
    cudaFree(p);
  }
  p = nullptr;
  cap = 0;
}

absl::Status GrowingMemory::Reserve(int64_t bytes, const char* what,
                                    std::vector<GrowingMemory>* retired) {
  if (bytes <= cap) return absl::OkStatus();
  if (p != nullptr) retired->push_back(*this);
  p = nullptr;
  cap = 0;
  const int64_t want = std::max<int64_t>((2 * bytes + 255) / 256 * 256, 256);
  void* q = nullptr;
  // Pinned blocks are mapped: kernels write some (a count's totals) in place.
  const cudaError_t e =
      pinned ? cudaHostAlloc(&q, want, cudaHostAllocMapped | cudaHostAllocPortable)
             : cudaMalloc(&q, want);
  REFIT_RETURN_IF_ERROR(CudaStatus(e, absl::StrCat("delta ", what, ": ", want, " bytes")));
  p = static_cast<char*>(q);
  cap = want;
  return absl::OkStatus();
}

}  // namespace refit
