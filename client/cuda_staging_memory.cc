// CudaStagingMemory (see cuda_staging_memory.h).
#include "client/cuda_staging_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/delta/cuda/changed_words_kernels.h"

namespace refit {
namespace {

// Device memory of at least `bytes` at *p (holding *cap): grown by freeing
// and allocating again (cudaFree waits for the device; the list grows at
// the first delta round and when the buffers grow). False when the device
// has no room.
absl::StatusOr<bool> Reserve(char** p, int64_t* cap, int64_t bytes) {
  if (bytes <= *cap) return true;
  if (*p != nullptr) REFIT_RETURN_IF_CUDA_ERROR(cudaFree(*p));
  *p = nullptr;
  *cap = 0;
  const int64_t want = (std::max<int64_t>(bytes, 1) + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  void* q = nullptr;
  const cudaError_t e = cudaMalloc(&q, static_cast<size_t>(want));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return false;
  }
  REFIT_RETURN_IF_ERROR(CudaStatus(e, absl::StrCat("changed-word list: ", want, " bytes")));
  *p = static_cast<char*>(q);
  *cap = want;
  return true;
}

// Whether the find and write kernels take the pair (else it is copied
// whole): 16-byte aligned sides, whole 2-byte words.
bool Listable(const StagedPair& p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p.live) | reinterpret_cast<uintptr_t>(p.staging);
  return (at & 15) == 0 && p.bytes % 2 == 0;
}

class CudaMemory : public StagingMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  ~CudaMemory() override {
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    for (char* p : {pairs_, tiles_, list_}) {
      if (p != nullptr) (void)cudaFree(p);
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
    REFIT_RETURN_IF_ERROR(Enter());
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

  // One read of both sides of every pair, on the copies' stream: tiles
  // with few changed words list them (up to 1/64 of the pairs' bytes in
  // entries of 4 bytes: 3% of BF16 words), the others are copied whole.
  absl::StatusOr<bool> FindChanged(absl::Span<const StagedPair> pairs) override {
    listed_ = false;
    REFIT_RETURN_IF_ERROR(Enter());
    std::vector<ChangedPair> table;
    whole_.clear();
    int64_t tiles = 0, bytes = 0;
    for (const StagedPair& p : pairs) {
      if (p.bytes <= 0) continue;
      if (!Listable(p)) {
        whole_.push_back(p);
        continue;
      }
      table.push_back({p.live, p.staging, p.bytes, tiles});
      tiles += ChangedTiles(p.bytes);
      bytes += p.bytes;
    }
    const int64_t capacity = std::max<int64_t>(bytes / 64, 1 << 16);
    const int64_t list_bytes = (capacity * 4 + 255) / 256 * 256;
    REFIT_ASSIGN_OR_RETURN(
        bool room,
        Reserve(&pairs_, &pairs_cap_, static_cast<int64_t>(table.size() * sizeof(ChangedPair))));
    if (room) {
      REFIT_ASSIGN_OR_RETURN(
          room, Reserve(&tiles_, &tiles_cap_, tiles * static_cast<int64_t>(sizeof(ChangedTile))));
    }
    if (room) {
      REFIT_ASSIGN_OR_RETURN(room, Reserve(&list_, &list_cap_, list_bytes + 8));
    }
    if (!room) return false;
    num_tiles_ = tiles;
    auto* used = reinterpret_cast<unsigned long long*>(list_ + list_bytes);
    if (!table.empty()) {
      REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(pairs_, table.data(),
                                                 table.size() * sizeof(ChangedPair),
                                                 cudaMemcpyHostToDevice, stream_));
      REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(used, 0, sizeof(*used), stream_));
      LaunchFindChanged(reinterpret_cast<const ChangedPair*>(pairs_),
                        static_cast<int32_t>(table.size()), tiles,
                        reinterpret_cast<ChangedTile*>(tiles_), reinterpret_cast<uint32_t*>(list_),
                        static_cast<uint64_t>(capacity), used, stream_);
      REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
    }
    listed_ = true;
    return true;
  }

  absl::Status WriteChanged() override {
    if (!listed_) {
      return absl::FailedPreconditionError(
          absl::StrCat("staging: no changed words listed on GPU ", device_));
    }
    listed_ = false;
    REFIT_RETURN_IF_ERROR(Enter());
    LaunchWriteChanged(reinterpret_cast<const ChangedTile*>(tiles_), num_tiles_,
                       reinterpret_cast<const uint32_t*>(list_), stream_);
    REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
    for (const StagedPair& p : whole_) {
      REFIT_RETURN_IF_ERROR(Copy(p.live, p.staging, p.bytes));
    }
    return absl::OkStatus();
  }

 private:
  // Makes the device current and the copies' stream.
  absl::Status Enter() {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
    if (stream_ == nullptr) {
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    return absl::OkStatus();
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  // The last FindChanged: its pairs, tiles and list on the device, and
  // the pairs it left to copy whole.
  char* pairs_ = nullptr;
  char* tiles_ = nullptr;
  char* list_ = nullptr;
  int64_t pairs_cap_ = 0, tiles_cap_ = 0, list_cap_ = 0;
  int64_t num_tiles_ = 0;
  std::vector<StagedPair> whole_;
  bool listed_ = false;
};

}  // namespace

std::unique_ptr<StagingMemory> CudaStagingMemory(int device) {
  return std::make_unique<CudaMemory>(device);
}

}  // namespace refit
