// DeferCudaFrees: cudaFree and cudaFreeHost recorded while deferring.
#include "testing/deferred_cuda_free.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <utility>
#include <vector>

namespace refit {
namespace testing {
namespace {

using FreeFn = cudaError_t (*)(void*);

struct Deferred {
  std::mutex mu;
  int depth = 0;
  std::vector<std::pair<void*, bool>> frees;  // pointer, pinned host
};

Deferred& State() {
  static Deferred* d = new Deferred;
  return *d;
}

FreeFn Real(const char* name) {
  return reinterpret_cast<FreeFn>(dlsym(RTLD_NEXT, name));
}

FreeFn RealFree() {
  static FreeFn f = Real("cudaFree");
  return f;
}

FreeFn RealFreeHost() {
  static FreeFn f = Real("cudaFreeHost");
  return f;
}

// Records `p` when deferring; else frees it with `real`.
cudaError_t FreeOrDefer(void* p, bool host, FreeFn real) {
  if (p != nullptr) {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (d.depth > 0) {
      d.frees.push_back({p, host});
      return cudaSuccess;
    }
  }
  return real == nullptr ? cudaErrorUnknown : real(p);
}

}  // namespace

DeferCudaFrees::DeferCudaFrees() {
  Deferred& d = State();
  std::lock_guard<std::mutex> l(d.mu);
  ++d.depth;
}

DeferCudaFrees::~DeferCudaFrees() {
  std::vector<std::pair<void*, bool>> frees;
  {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (--d.depth > 0) return;
    frees.swap(d.frees);
  }
  for (const auto& [p, host] : frees) {
    FreeFn f = host ? RealFreeHost() : RealFree();
    if (f != nullptr) f(p);
  }
}

}  // namespace testing
}  // namespace refit

extern "C" cudaError_t cudaFree(void* p) {
  return refit::testing::FreeOrDefer(p, false, refit::testing::RealFree());
}

extern "C" cudaError_t cudaFreeHost(void* p) {
  return refit::testing::FreeOrDefer(p, true, refit::testing::RealFreeHost());
}
