// CUDA contexts of their own for ranks that are threads of one process on
// one GPU. In one context, a device-wide synchronization of one rank (a
// cudaFree, which waits for every stream of the context) would wait on
// another rank's transport gate, which waits on the first rank's next
// post: a deadlock two GPUs never have. In separate contexts, a rank's
// synchronization waits only for its own work (the GPU time-slices the
// contexts), as on two GPUs. The CUDA runtime uses the calling thread's
// current context, so a rank's thread makes its context current first.
// Driver calls go through cudaGetDriverEntryPointByVersion (no link to
// libcuda).
#ifndef REFIT_TESTING_CUDA_CONTEXTS_H_
#define REFIT_TESTING_CUDA_CONTEXTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace refit {
namespace testing {

class CudaContexts {
 public:
  // Creates `n` contexts on `device`. Fails with UNAVAILABLE (no device, or
  // the driver lacks an entry point) naming the call.
  static absl::StatusOr<std::unique_ptr<CudaContexts>> Create(int32_t device, int32_t n);
  // Destroys the contexts (their memory and streams with them).
  ~CudaContexts();

  // Makes context `i` current on the calling thread. Fails with
  // INVALID_ARGUMENT for a bad index, UNAVAILABLE for a driver error.
  absl::Status Use(int32_t i) const;
  // Context `i` (a CUcontext) or null for a bad index.
  void* context(int32_t i) const;

 private:
  CudaContexts() = default;
  std::vector<void*> contexts_;
};

// The calling thread's current context (a CUcontext; null: none).
void* CurrentCudaContext();
// Makes `context` (a CUcontext) current on the calling thread. Fails with
// UNAVAILABLE for a driver error.
absl::Status SetCurrentCudaContext(void* context);
// Enqueues on `stream` a copy of `bytes` from device memory `src` of
// context `src_context` to `dst` of `dst_context` (cuMemcpyPeerAsync).
// Fails with UNAVAILABLE for a driver error.
absl::Status CopyAcrossContexts(void* dst, void* dst_context, const void* src, void* src_context,
                                int64_t bytes, cudaStream_t stream);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_CUDA_CONTEXTS_H_
