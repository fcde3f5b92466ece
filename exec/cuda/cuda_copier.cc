// The CUDA copier: cudaMalloc staging, pack/unpack and conversion
// kernels on the lane streams.
#include "exec/cuda/cuda_copier.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/cuda/pack_kernels.h"
#include "exec/convert/cuda/cuda_convert_ops.h"
#include "layout/dtype.h"
#include "layout/tensor_spec.h"

namespace refit {

namespace {

class CudaCopier : public Copier {
 public:
  explicit CudaCopier(CudaLanes* t) : t_(t), lanes_(t->num_lanes()) {}
  ~CudaCopier() override {
    for (auto& lane : lanes_) {
      for (Chunk& c : lane) {
        if (c.used != nullptr) cudaEventDestroy(c.used);
        if (c.dev != nullptr) cudaFree(c.dev);
        if (c.host != nullptr) cudaFreeHost(c.host);
      }
    }
  }
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  absl::StatusOr<char*> Allocate(int64_t bytes) override {
    void* p = nullptr;
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaMalloc(&p, bytes),
        absl::StrCat("cudaMalloc of ", bytes, " bytes of staging")));
    return static_cast<char*>(p);
  }
  void Free(char* p) override { cudaFree(p); }
  // Uploads the copy tasks through a pinned chunk of the lane (so the
  // upload never blocks the host, even behind a wave whose peer died) and
  // launches the kernel on the lane's stream. A chunk is reused once its
  // kernel has run (its event); otherwise a new one is added, so after the
  // first refit a lane holds one chunk per wave it can have queued.
  absl::Status Copy(int32_t lane,
                    absl::Span<const ResolvedCopy> copies) override {
    if (copies.empty()) return absl::OkStatus();
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("lane ", lane, " out of range"));
    }
    cudaStream_t s = static_cast<cudaStream_t>(t_->stream(lane));
    const size_t bytes = copies.size() * sizeof(ResolvedCopy);
    std::vector<Chunk>& ring = lanes_[lane];
    Chunk* c = nullptr;
    for (Chunk& k : ring) {
      if (k.bytes >= bytes && cudaEventQuery(k.used) == cudaSuccess) {
        c = &k;
        break;
      }
    }
    if (c == nullptr) {
      Chunk k;
      k.bytes = std::max<size_t>(bytes, 64 << 10);
      absl::Status st = CudaStatus(cudaMallocHost(&k.host, k.bytes),
                                   "cudaMallocHost of copy tasks");
      if (st.ok()) st = CudaStatus(cudaMalloc(&k.dev, k.bytes), "cudaMalloc of copy tasks");
      if (st.ok()) {
        st = CudaStatus(cudaEventCreateWithFlags(&k.used, cudaEventDisableTiming),
                        "cudaEventCreate");
      }
      if (!st.ok()) {
        if (k.dev != nullptr) cudaFree(k.dev);
        if (k.host != nullptr) cudaFreeHost(k.host);
        return st;
      }
      ring.push_back(k);
      c = &ring.back();
    }
    std::memcpy(c->host, copies.data(), bytes);
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(c->dev, c->host, bytes, cudaMemcpyHostToDevice, s),
        "copy tasks to device"));
    REFIT_RETURN_IF_ERROR(CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchCopies(
            static_cast<const ResolvedCopy*>(c->dev),
            static_cast<int>(copies.size()), s)),
        "pack/unpack kernel launch"));
    return CudaStatus(cudaEventRecord(c->used, s), "cudaEventRecord");
  }
  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    cudaStream_t s = static_cast<cudaStream_t>(t_->stream(lane));
    while (true) {
      cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return CudaStatus(q, "pack/unpack kernel");
      REFIT_RETURN_IF_ERROR(t_->CheckCancelled());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("lane ", lane, ": copies not complete by the deadline"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  }
  absl::Status ToHost(void* dst, const char* src, int64_t bytes) override {
    return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
                      "device to host copy");
  }
  // Pack/unpack kernels run on the lane's NCCL stream.
  bool OrderedWithTransport() const override { return true; }
  absl::Status FromHost(char* dst, const void* src, int64_t bytes) override {
    return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice),
                      "host to device copy");
  }
  // Conversions run on the lane's stream.
  std::unique_ptr<ConvertOps> MakeConvertOps(int32_t lane) override {
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) return nullptr;
    return MakeCudaConvertOps(t_->stream(lane));
  }

 private:
  struct Chunk {
    void* host = nullptr;  // pinned
    void* dev = nullptr;
    size_t bytes = 0;
    cudaEvent_t used = nullptr;  // recorded after the kernel that reads dev
  };
  CudaLanes* t_;
  std::vector<std::vector<Chunk>> lanes_;
};

}  // namespace

std::unique_ptr<Copier> MakeCudaCopier(CudaLanes* t) {
  return std::make_unique<CudaCopier>(t);
}

}  // namespace refit
