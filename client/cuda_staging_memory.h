// CudaStagingMemory: the staging of a GPU engine member's staged rounds
// (client/staged_buffers.h): fast memory is device memory (cudaMalloc),
// overflow memory pinned host memory (cudaMallocHost: the device reads and
// writes it too, so the data plane lands bytes there directly); copies
// between staging and live buffers run on a stream of their own, one copy
// per buffer, and a delta round's apply writes only the 32-byte sectors
// that changed (StagingMemory::FindChanged).
#ifndef REFIT_CLIENT_CUDA_STAGING_MEMORY_H_
#define REFIT_CLIENT_CUDA_STAGING_MEMORY_H_

#include <memory>

#include "client/staged_buffers.h"

namespace refit {

// Staging on CUDA device `device`; its stream is created at the first copy
// (the device's error then names cudaStreamCreate).
std::unique_ptr<StagingMemory> CudaStagingMemory(int device);

}  // namespace refit

#endif  // REFIT_CLIENT_CUDA_STAGING_MEMORY_H_
