// DeferCudaFrees: while one is alive, cudaFree and cudaFreeHost of every
// thread of a binary that links //testing:deferred_cuda_free only record
// the pointer (returning cudaSuccess); the object's destructor frees them
// all. cudaFree waits for the whole device: in a check whose ranks are
// threads on one GPU (cuda_inproc_transport.h), a rank freeing memory
// during a round (a conversion's scratch growing) would wait on another
// rank's transport gate, which waits on the freeing rank. The library
// defines cudaFree and cudaFreeHost (the real ones found with dlsym), so
// link it into test binaries only.
#ifndef REFIT_TESTING_DEFERRED_CUDA_FREE_H_
#define REFIT_TESTING_DEFERRED_CUDA_FREE_H_

namespace refit {
namespace testing {

class DeferCudaFrees {
 public:
  DeferCudaFrees();
  // Frees what was recorded while it was alive (nested ones: the outermost).
  ~DeferCudaFrees();
  DeferCudaFrees(const DeferCudaFrees&) = delete;
  DeferCudaFrees& operator=(const DeferCudaFrees&) = delete;
};

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_DEFERRED_CUDA_FREE_H_
