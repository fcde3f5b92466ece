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
using MallocHostFn = cudaError_t (*)(void**, size_t);

struct Deferred {
  std::mutex mu;
  int depth = 0;
  std::vector<std::pair<void*, bool>> frees;  // pointer, pinned host
  char* pool = nullptr;
  size_t pool_bytes = 0;
  size_t pool_used = 0;
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
};

const RealCalls& Real() {
  static const RealCalls* r = new RealCalls;
  return *r;
}

bool InPool(const Deferred& d, const void* p) {
  const char* c = static_cast<const char*>(p);
  return d.pool != nullptr && c >= d.pool && c < d.pool + d.pool_bytes;
}

// Records `p` when deferring (a pool pointer: nothing to do); else frees it.
cudaError_t FreeOrDefer(void* p, bool host, FreeFn real) {
  if (p != nullptr) {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (InPool(d, p)) return cudaSuccess;
    if (d.depth > 0) {
      d.frees.push_back({p, host});
      return cudaSuccess;
    }
  }
  return real == nullptr ? cudaErrorUnknown : real(p);
}

// `bytes` from the pool when deferring and it has room, else null.
void* FromPool(size_t bytes) {
  Deferred& d = State();
  std::lock_guard<std::mutex> l(d.mu);
  const size_t need = (bytes + 255) / 256 * 256;
  if (d.depth == 0 || d.pool == nullptr || d.pool_used + need > d.pool_bytes) return nullptr;
  void* p = d.pool + d.pool_used;
  d.pool_used += need;
  return p;
}

}  // namespace

DeferCudaFrees::DeferCudaFrees(int64_t pinned_pool_bytes) {
  Deferred& d = State();
  {
    std::lock_guard<std::mutex> l(d.mu);
    if (d.depth++ > 0) return;
  }
  void* pool = nullptr;
  HostAllocFn alloc = Real().host_alloc;
  if (alloc != nullptr && pinned_pool_bytes > 0 &&
      alloc(&pool, static_cast<size_t>(pinned_pool_bytes),
            cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
    std::lock_guard<std::mutex> l(d.mu);
    d.pool = static_cast<char*>(pool);
    d.pool_bytes = static_cast<size_t>(pinned_pool_bytes);
    d.pool_used = 0;
  }
}

DeferCudaFrees::~DeferCudaFrees() {
  std::vector<std::pair<void*, bool>> frees;
  char* pool = nullptr;
  {
    Deferred& d = State();
    std::lock_guard<std::mutex> l(d.mu);
    if (--d.depth > 0) return;
    frees.swap(d.frees);
    pool = d.pool;
    d.pool = nullptr;
    d.pool_bytes = d.pool_used = 0;
  }
  for (const auto& [p, host] : frees) {
    FreeFn f = host ? Real().free_host : Real().free;
    if (f != nullptr) f(p);
  }
  if (pool != nullptr && Real().free_host != nullptr) Real().free_host(pool);
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
  if (void* q = refit::testing::FromPool(bytes)) {
    *p = q;
    return cudaSuccess;
  }
  auto real = refit::testing::Real().host_alloc;
  return real == nullptr ? cudaErrorUnknown : real(p, bytes, flags);
}

extern "C" cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (void* q = refit::testing::FromPool(bytes)) {
    *p = q;
    return cudaSuccess;
  }
  auto real = refit::testing::Real().malloc_host;
  return real == nullptr ? cudaErrorUnknown : real(p, bytes);
}
