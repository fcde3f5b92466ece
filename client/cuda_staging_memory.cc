// CudaStagingMemory (see cuda_staging_memory.h).
#include "client/cuda_staging_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/delta/cuda/changed_words_kernels.h"

namespace refit {
namespace {

// Device memory of at least `bytes` at *p (holding *cap): grown by freeing
// and allocating again (cudaFree waits for the device; it grows at the
// first round and when the buffers grow). False when the device has no
// room.
absl::StatusOr<bool> Reserve(char** p, int64_t* cap, int64_t bytes) {
  if (bytes <= *cap) return true;
  if (*p != nullptr) REFIT_RETURN_IF_CUDA_ERROR(cudaFree(*p));
  *p = nullptr;
  *cap = 0;
  const int64_t want = (std::max<int64_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* q = nullptr;
  const cudaError_t e = cudaMalloc(&q, static_cast<size_t>(want));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return false;
  }
  REFIT_RETURN_IF_ERROR(CudaStatus(e, absl::StrCat("staging sector mask: ", want, " bytes")));
  *p = static_cast<char*>(q);
  *cap = want;
  return true;
}

// The blocks a delta round's apply writes whole: 32-byte sectors (on an
// H100 at 2% of BF16 words changed, 7.28 ms against 7.40 ms for 64-byte
// blocks and 8.99 ms for 128: docs/benchmarks.md).
constexpr int kUnitBytes = 32;

// Whether the kernels take the pair (else cudaMemcpyAsync copies it):
// both sides 16-byte aligned.
bool Batchable(const StagedPair& p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p.live) | reinterpret_cast<uintptr_t>(p.staging);
  return (at & 15) == 0 && p.bytes > 0;
}

// The kernels' table of `pairs` and its tiles; the pairs they do not take
// go to *rest.
std::vector<ChangedPair> Table(absl::Span<const StagedPair> pairs, int64_t* tiles,
                               std::vector<StagedPair>* rest) {
  std::vector<ChangedPair> table;
  *tiles = 0;
  for (const StagedPair& p : pairs) {
    if (p.bytes <= 0) continue;
    if (!Batchable(p)) {
      rest->push_back(p);
      continue;
    }
    table.push_back({p.live, p.staging, p.bytes, *tiles});
    *tiles += ChangedTiles(p.bytes);
  }
  return table;
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
    for (char* p : {pairs_, mask_}) {
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
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of ", fast ? "device" : "pinned host",
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
    return CudaStatus(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_),
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

  // One read of both sides of every pair, on the copies' stream, marks the
  // 32-byte sectors that differ (a bit per sector: 1/256 of the pairs'
  // bytes of device memory).
  absl::StatusOr<bool> FindChanged(absl::Span<const StagedPair> pairs) override {
    listed_ = false;
    REFIT_RETURN_IF_ERROR(Enter());
    whole_.clear();
    table_ = Table(pairs, &num_tiles_, &whole_);
    REFIT_ASSIGN_OR_RETURN(bool room, Upload(table_, &pairs_, &pairs_cap_));
    if (room) {
      REFIT_ASSIGN_OR_RETURN(
          room, Reserve(&mask_, &mask_cap_, num_tiles_ * ChangedMaskWords(kUnitBytes) * 4));
    }
    if (!room) return false;
    num_pairs_ = static_cast<int32_t>(table_.size());
    LaunchFindChanged(reinterpret_cast<const ChangedPair*>(pairs_), num_pairs_, num_tiles_,
                      kUnitBytes, reinterpret_cast<uint32_t*>(mask_), stream_);
    REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
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
    LaunchWriteChanged(reinterpret_cast<const ChangedPair*>(pairs_), num_pairs_, num_tiles_,
                       kUnitBytes, reinterpret_cast<const uint32_t*>(mask_), stream_);
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

  // Enqueues the copy of `table` (kept until the next call's) into *p
  // (grown); false when the device has no room.
  absl::StatusOr<bool> Upload(const std::vector<ChangedPair>& table, char** p, int64_t* cap) {
    const int64_t bytes = static_cast<int64_t>(table.size() * sizeof(ChangedPair));
    REFIT_ASSIGN_OR_RETURN(const bool room, Reserve(p, cap, bytes));
    if (!room || table.empty()) return room;
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(*p, table.data(), bytes, cudaMemcpyHostToDevice, stream_));
    return true;
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  // The last FindChanged: its pairs (host and device) and block mask, and
  // the pairs it left to copy whole.
  std::vector<ChangedPair> table_;
  char* pairs_ = nullptr;
  char* mask_ = nullptr;
  int64_t pairs_cap_ = 0, mask_cap_ = 0;
  int32_t num_pairs_ = 0;
  int64_t num_tiles_ = 0;
  std::vector<StagedPair> whole_;
  bool listed_ = false;
};

}  // namespace

std::unique_ptr<StagingMemory> CudaStagingMemory(int device) {
  return std::make_unique<CudaMemory>(device);
}

}  // namespace refit
