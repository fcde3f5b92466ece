// DeferCudaFrees: frees recorded and pinned memory pooled while deferring.
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
using HostAllocFn = cudaError_t (*)(void**, size_t, unsigned int);
using MallocHostFn = cudaError_t (*)(void**, size_t);  // also cudaMalloc's

// A bump allocator over one allocation.
struct Pool {
  char* base = nullptr;
  size_t bytes = 0;
  size_t used = 0;
  bool Holds(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return base != nullptr && c >= base && c < base + bytes;
  }
  void* Take(size_t n) {
    const size_t need = (n + 255) / 256 * 256;
    if (base == nullptr || used + need > bytes) return nullptr;
    void* p = base + used;
    used += need;
    return p;
  }
};

struct Deferred {
  std::mutex mu;
  int depth = 0;
  std::vector<std::pair<void*, bool>> frees;  // pointer, pinned host
  Pool pinned, device;
};

Deferred& State() {
  static Deferred* d = new Deferred;
  return *d;
}

template <typename F>
F Load(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// The CUDA runtime's own functions (null where not found).
struct RealCalls {
  FreeFn free = Load<FreeFn>("cudaFree");
  FreeFn free_host = Load<FreeFn>("cudaFreeHost");
  HostAllocFn host_alloc = Load<HostAllocFn>("cudaHostAlloc");
  MallocHostFn malloc_host = Load<MallocHostFn>("cudaMallocHost");
  MallocHostFn malloc = Load<MallocHostFn>("cudaMalloc");
};

const RealCalls& Real() {
  static const RealCalls* r = new RealCalls;
  return *r;
}

// Records `p` when deferring (a pool pointer: nothing to do); else frees it.
cudaError_t FreeOrDefer(void* p, bool host, FreeFn real) {
  if (p != nullptr) {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (d.pinned.Holds(p) || d.device.Holds(p)) return cudaSuccess;
    if (d.depth > 0) {
      d.frees.push_back({p, host});
      return cudaSuccess;
    }
  }
  return real == nullptr ? cudaErrorUnknown : real(p);
}

// `bytes` from the pinned (else device) pool when deferring and it has
// room, else null.
void* FromPool(size_t bytes, bool pinned) {
  Deferred& d = State();
  std::lock_guard<std::mutex> l(d.mu);
  if (d.depth == 0 || bytes == 0) return nullptr;
  return (pinned ? d.pinned : d.device).Take(bytes);
}

}  // namespace

DeferCudaFrees::DeferCudaFrees(int64_t pinned_pool_bytes, int64_t device_pool_bytes) {
  Deferred& d = State();
  {
    std::lock_guard<std::mutex> l(d.mu);
    if (d.depth++ > 0) return;
  }
  Pool pinned, device;
  const RealCalls& real = Real();
  void* p = nullptr;
  if (real.host_alloc != nullptr && pinned_pool_bytes > 0 &&
      real.host_alloc(&p, static_cast<size_t>(pinned_pool_bytes),
                      cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
    pinned = {static_cast<char*>(p), static_cast<size_t>(pinned_pool_bytes), 0};
  }
  p = nullptr;
  if (real.malloc != nullptr && device_pool_bytes > 0 &&
      real.malloc(&p, static_cast<size_t>(device_pool_bytes)) == cudaSuccess) {
    device = {static_cast<char*>(p), static_cast<size_t>(device_pool_bytes), 0};
  }
  std::lock_guard<std::mutex> l(d.mu);
  d.pinned = pinned;
  d.device = device;
}

DeferCudaFrees::~DeferCudaFrees() {
  std::vector<std::pair<void*, bool>> frees;
  Pool pinned, device;
  {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (--d.depth > 0) return;
    frees.swap(d.frees);
    std::swap(pinned, d.pinned);
    std::swap(device, d.device);
  }
  const RealCalls& real = Real();
  for (const auto& [p, host] : frees) {
    FreeFn f = host ? real.free_host : real.free;
    if (f != nullptr) f(p);
  }
  if (pinned.base != nullptr && real.free_host != nullptr) real.free_host(pinned.base);
  if (device.base != nullptr && real.free != nullptr) real.free(device.base);
}

}  // namespace testing
}  // namespace refit

extern "C" cudaError_t cudaFree(void* p) {
  return refit::testing::FreeOrDefer(p, false, refit::testing::Real().free);
}

extern "C" cudaError_t cudaFreeHost(void* p) {
  return refit::testing::FreeOrDefer(p, true, refit::testing::Real().free_host);
}

extern "C" cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (void* q = refit::testing::FromPool(bytes, /*pinned=*/true)) {
    *p = q;
    return cudaSuccess;
  }
  auto real = refit::testing::Real().host_alloc;
  return real == nullptr ? cudaErrorUnknown : real(p, bytes, flags);
}

extern "C" cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (void* q = refit::testing::FromPool(bytes, /*pinned=*/true)) {
    *p = q;
    return cudaSuccess;
  }
  auto real = refit::testing::Real().malloc_host;
  return real == nullptr ? cudaErrorUnknown : real(p, bytes);
}

extern "C" cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (void* q = refit::testing::FromPool(bytes, /*pinned=*/false)) {
    *p = q;
    return cudaSuccess;
  }
  auto real = refit::testing::Real().malloc;
  return real == nullptr ? cudaErrorUnknown : real(p, bytes);
}
