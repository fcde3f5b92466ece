// Device or pinned host memory that grows and never shrinks, for the GPU
// wave ops' per-wave scratch. Growing retires the old block instead of
// freeing it: cudaFree waits for the whole device, and an NCCL kernel of
// the running round waiting for a peer that waits for us would never let
// it return. The owner frees retired blocks once the device is idle.
#ifndef REFIT_EXEC_DELTA_CUDA_GROWING_MEMORY_H_
#define REFIT_EXEC_DELTA_CUDA_GROWING_MEMORY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace refit {

struct GrowingMemory {
  char* p = nullptr;
  int64_t cap = 0;
  // Pinned host memory, mapped (unified addressing: kernels use its host
  // pointer), instead of device memory.
  bool pinned = false;

  // Frees the block now (cudaFree / cudaFreeHost); the device must be done
  // with it.
  void Release();

  // Makes cap at least `bytes` (twice that, 256-byte multiples, when it
  // grows); the block it held goes to *retired. The caller makes sure its
  // last use completed. UNAVAILABLE-like CUDA status naming `what` when the
  // allocation fails.
  absl::Status Reserve(int64_t bytes, const char* what, std::vector<GrowingMemory>* retired);
};

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_GROWING_MEMORY_H_
