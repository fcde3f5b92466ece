// CudaStagingMemory (see cuda_staging_memory.h).
#include "client/cuda_staging_memory.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"

namespace refit {
namespace {

class CudaMemory : public StagingMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  ~CudaMemory() override {
    if (stream_ != nullptr) {
      (void)cudaSetDevice(device_);
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
  }

  absl::StatusOr<char*> Allocate(int64_t bytes, bool fast) override {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
    void* p = nullptr;
    const size_t n = static_cast<size_t>(bytes > 0 ? bytes : 1);
    const cudaError_t e = fast ? cudaMalloc(&p, n) : cudaMallocHost(&p, n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", bytes, " bytes of ", fast ? "device" : "pinned host",
          " staging on GPU ", device_, ": ", cudaGetErrorString(e)));
    }
    return static_cast<char*>(p);
  }

  void Free(char* p, bool fast) override {
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    (void)(fast ? cudaFree(p) : cudaFreeHost(p));
  }

  absl::Status Copy(char* dst, const char* src, int64_t bytes) override {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
    if (stream_ == nullptr) {
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    return CudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault,
                                      stream_),
                      absl::StrCat("staging copy of ", bytes, " bytes"));
  }

  absl::Status Sync(absl::Time deadline) override {
    if (stream_ == nullptr) return absl::OkStatus();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaStatus(e, "staging copies");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError("staging copies did not finish by the deadline");
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

 private:
  const int device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<StagingMemory> CudaStagingMemory(int device) {
  return std::make_unique<CudaMemory>(device);
}

}  // namespace refit
