// DeferCudaFrees: while one is alive, in a binary that links
// //testing:deferred_cuda_free,
//   * cudaFree and cudaFreeHost of every thread only record the pointer
//     (returning cudaSuccess); the object's destructor frees them all;
//   * cudaMallocHost and cudaHostAlloc are served from a pinned, mapped,
//     portable pool, cudaMalloc from a device pool, both made by the
//     constructor (the real calls once one is used up); the destructor
//     frees them.
// Freeing (and allocating) memory may wait for the whole device: in a check
// whose ranks are threads on one GPU (cuda_inproc_transport.h), a rank
// doing so during a round would wait on another rank's transport gate,
// which waits on that rank. The library defines those five functions (the
// real ones found with dlsym), so link it into test binaries only.
#ifndef REFIT_TESTING_DEFERRED_CUDA_FREE_H_
#define REFIT_TESTING_DEFERRED_CUDA_FREE_H_

#include <cstdint>

namespace refit {
namespace testing {

class DeferCudaFrees {
 public:
  // The pools' sizes (a pool the real call refuses is not used; nested
  // ones: the outermost's).
  explicit DeferCudaFrees(int64_t pinned_pool_bytes = int64_t{256} << 20,
                          int64_t device_pool_bytes = int64_t{4} << 30);
  // Frees what was recorded while it was alive, then the pools (nested
  // ones: the outermost).
  ~DeferCudaFrees();
  DeferCudaFrees(const DeferCudaFrees&) = delete;
  DeferCudaFrees& operator=(const DeferCudaFrees&) = delete;
};

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_DEFERRED_CUDA_FREE_H_
