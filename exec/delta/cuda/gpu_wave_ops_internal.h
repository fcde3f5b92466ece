// The GPU wave ops' state (gpu_wave_ops.h): per lane its streams and the
// slots of its counts in flight, and the class whose methods
// gpu_wave_ops.cc (counts, encodes, applies) and gpu_wave_digests.cc
// (verified rounds' digests) define. Private to exec/delta/cuda.
#ifndef REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_INTERNAL_H_
#define REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "exec/delta/cuda/growing_memory.h"

namespace refit {
namespace gpu_wave_internal {

constexpr int64_t kHeader = sizeof(DeltaHeader);

using Mem = GrowingMemory;

// One count and its encode: the wave's message rows, mask, values, tile
// counts and offsets, per-message totals, headers. A lane has
// kMaxCountsInFlight of them; StartCount takes a free one.
struct CountSlot {
  // began/counted and gathering/encoded bound the count (its mask pass,
  // which leaves the totals on the host) and the encode (timed: TakeTimes).
  cudaEvent_t began = nullptr, counted = nullptr, gathering = nullptr, encoded = nullptr;
  // The rows uploaded (a wave of more rows than a launch carries); the
  // tiles' offsets scanned (on the codec stream while the host builds the
  // headers: the encode's gather waits for it, not the scan for the host).
  cudaEvent_t uploaded = nullptr, scanned = nullptr;
  bool encode_timed = false;  // an encode to time once `encoded` completed
  Mem table_h{nullptr, 0, true}, table, mask, vals, idx, counts, offsets, totals,
      totals_h{nullptr, 0, true};
  std::vector<WaveMsg> msgs;  // the count's rows (the encode's, once it fills them)
  std::vector<int32_t> msg_of_item;
  std::vector<int64_t> words_of_item;  // the count's items
  bool counting = false;
  int64_t num_msgs = 0, num_tiles = 0;
  std::vector<Mem*> mems() {
    return {&table_h, &table, &mask, &vals, &idx, &counts, &offsets, &totals, &totals_h};
  }
};

// One apply's tables and checks (GpuWaveOps::Apply).
struct ApplySlot {
  cudaEvent_t applied = nullptr;
  Mem apply_h{nullptr, 0, true}, apply, counts, offsets, bad, bad_h{nullptr, 0, true};
  std::vector<std::string> pending;  // names of the apply in flight
  int64_t pending_msgs = 0;
  std::vector<Mem*> mems() { return {&apply_h, &apply, &counts, &offsets, &bad, &bad_h}; }
};

struct Lane {
  cudaStream_t stream = nullptr;  // the transport's
  // Lane 0's, shared by every lane: counts, in the order they start.
  // Counts read at the HBM rate: two at once would take twice as long
  // each, delay both waves' sends and hold the SMs the gathers need.
  cudaStream_t codec = nullptr;
  bool owns_codec = false;  // lane 0
  // Ours, beside the codec streams (shared as they are): the rows of a
  // count of more messages than its launch carries go up, and received
  // headers come down here, so the codec stream runs the mask passes back
  // to back.
  cudaStream_t upload = nullptr, download = nullptr;
  // Ours, of the highest priority: encodes (gathers). A gather's blocks go
  // before the rest of the next wave's count, which is queued by then and
  // would otherwise hold every SM until it ends.
  cudaStream_t gather = nullptr;
  cudaEvent_t mark = nullptr, fetched = nullptr;
  std::vector<CountSlot> slots;
  std::deque<int> started;  // slots counting, oldest first
  int finished = -1;  // the slot FinishCount returned last: Encode's
  // Apply.
  // Applies alternate over two slots, so an apply waits for the one before
  // the last (which ran while its batch's payloads and the next headers
  // arrived), not for the last.
  ApplySlot applies[2];
  int next_apply = 0;
  Mem headers_in_h{nullptr, 0, true};
  // Ours: digests (AddDigest), beside the lane's transfers.
  cudaStream_t digest = nullptr;
};

// One AddDigest's (or a count's dense messages') runs: host and device
// tables, kept until TakeDigests (the kernel reads the device one).
struct DigestTable {
  Mem host{nullptr, 0, true}, dev;
};

class GpuWaveOps : public DeltaWaveOps {
 public:
  GpuWaveOps(CudaLanes* lanes, GpuWaveOpsOptions o) : t_(lanes), o_(o) {}
  ~GpuWaveOps() override {
    cudaSetDevice(o_.device);
    for (Mem& m : retired_) m.Release();
    for (Lane& l : lanes_) {  // before any stream goes: lanes may share them
      for (cudaStream_t s : {l.codec, l.upload, l.download, l.gather, l.digest}) {
        if (s != nullptr) cudaStreamSynchronize(s);
      }
    }
    for (Lane& l : lanes_) {
      l.headers_in_h.Release();
      for (ApplySlot& a : l.applies) {
        for (Mem* m : a.mems()) m->Release();
        if (a.applied != nullptr) cudaEventDestroy(a.applied);
      }
      for (CountSlot& c : l.slots) {
        for (Mem* m : c.mems()) m->Release();
        for (cudaEvent_t e :
             {c.began, c.counted, c.gathering, c.encoded, c.uploaded, c.scanned}) {
          if (e != nullptr) cudaEventDestroy(e);
        }
      }
      for (cudaEvent_t e : {l.mark, l.fetched}) {
        if (e != nullptr) cudaEventDestroy(e);
      }
      if (l.owns_codec && l.codec != nullptr) cudaStreamDestroy(l.codec);
      if (l.owns_codec && l.upload != nullptr) cudaStreamDestroy(l.upload);
      if (l.owns_codec && l.download != nullptr) cudaStreamDestroy(l.download);
      if (l.gather != nullptr) cudaStreamDestroy(l.gather);
      if (l.digest != nullptr) cudaStreamDestroy(l.digest);
    }
    for (DigestTable& t : tables_) {
      t.host.Release();
      t.dev.Release();
    }
    if (origin_ != nullptr) cudaEventDestroy(origin_);
    sums_.Release();
    sums_h_.Release();
  }

  absl::Status Init() {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(o_.device));
    lanes_.resize(t_->num_lanes());
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreate(&origin_));
    for (int32_t i = 0; i < t_->num_lanes(); ++i) {
      Lane& l = lanes_[i];
      l.stream = static_cast<cudaStream_t>(t_->stream(i));
      if (i == 0) {
        REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.codec, cudaStreamNonBlocking));
        REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.upload, cudaStreamNonBlocking));
        REFIT_RETURN_IF_CUDA_ERROR(
            cudaStreamCreateWithFlags(&l.download, cudaStreamNonBlocking));
        l.owns_codec = true;
      } else {
        l.codec = lanes_[0].codec;
        l.upload = lanes_[0].upload;
        l.download = lanes_[0].download;
      }
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.digest, cudaStreamNonBlocking));
      int least = 0, greatest = 0;
      REFIT_RETURN_IF_CUDA_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      REFIT_RETURN_IF_CUDA_ERROR(
          cudaStreamCreateWithPriority(&l.gather, cudaStreamNonBlocking, greatest));
      for (cudaEvent_t* e : {&l.mark, &l.fetched}) {
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
      }
      l.slots.resize(kMaxCountsInFlight);
      for (CountSlot& c : l.slots) {
        for (cudaEvent_t* e : {&c.began, &c.counted, &c.gathering, &c.encoded}) {
          REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(e, cudaEventDefault));
        }
        for (cudaEvent_t* e : {&c.uploaded, &c.scanned}) {
          REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        }
        // Nothing in flight yet: the events count as done.
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.encoded, l.codec));
      }
      for (ApplySlot& a : l.applies) {
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&a.applied, cudaEventDisableTiming));
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(a.applied, l.codec));
      }
    }
    return absl::OkStatus();
  }

  MemoryKind kind() const override { return MemoryKind::kDevice; }
  bool OrderedWithTransport() const override { return true; }

  absl::StatusOr<char*> Allocate(int64_t bytes) override {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(o_.device));
    void* p = nullptr;
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, std::max<int64_t>(bytes, 1)),
                                     absl::StrCat("delta buffer of ", bytes, " bytes")));
    return static_cast<char*>(p);
  }
  void Free(char* p) override {
    cudaSetDevice(o_.device);
    cudaFree(p);
  }
  absl::StatusOr<char*> AllocateSnapshot(int64_t bytes) override {
    if (o_.snapshot == SnapshotMemory::kDevice) return Allocate(bytes);
    void* p = nullptr;
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaHostAlloc(&p, std::max<int64_t>(bytes, 1), cudaHostAllocMapped | cudaHostAllocPortable),
        absl::StrCat("pinned delta snapshot of ", bytes, " bytes")));
    return static_cast<char*>(p);
  }
  std::function<void(char*)> SnapshotReleaser() const override {
    if (o_.snapshot == SnapshotMemory::kDevice) {
      return [device = o_.device](char* p) {
        int was = 0;
        cudaGetDevice(&was);
        cudaSetDevice(device);
        cudaFree(p);
        cudaSetDevice(was);
      };
    }
    return [](char* p) { cudaFreeHost(p); };
  }

  absl::Status AfterLane(int32_t lane) override {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->mark, l->stream));
    REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->codec, l->mark, 0));
    return absl::OkStatus();
  }

  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
    for (cudaStream_t s :
         {l->stream, l->codec, l->upload, l->download, l->gather, l->digest}) {
      REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->mark, s));
      REFIT_RETURN_IF_ERROR(Wait(l->mark, deadline, "delta kernels"));
    }
    return absl::OkStatus();
  }

  absl::Status Copy(int32_t lane, char* dst, const char* src, int64_t bytes) override {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
    if (bytes <= 0) return absl::OkStatus();
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, l->stream));
    return absl::OkStatus();
  }

  absl::Status HeadersToHost(int32_t lane, const char* src, DeltaHeader* dst, int64_t n,
                             absl::Time deadline) override {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
    if (n <= 0) return absl::OkStatus();
    REFIT_RETURN_IF_ERROR(l->headers_in_h.Reserve(n * kHeader, "headers", &retired_));
    // The headers landed (the caller waited for their receive): fetch them
    // beside the lane's later work (the last batch's apply), not behind it.
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(l->headers_in_h.p, src, n * kHeader,
                                               cudaMemcpyDefault, l->download));
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->fetched, l->download));
    REFIT_RETURN_IF_ERROR(Wait(l->fetched, deadline, "delta headers"));
    std::memcpy(dst, l->headers_in_h.p, n * kHeader);
    return absl::OkStatus();
  }

  absl::Status StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                          absl::Time deadline) override;
  absl::StatusOr<std::vector<int64_t>> FinishCount(int32_t lane, absl::Time deadline) override;
  absl::Status Encode(int32_t lane, absl::Span<const EncodeItem> items,
                      absl::Span<const DeltaHeader> headers, absl::Span<char* const> out,
                      char* header_out, absl::Time deadline) override;
  absl::Status Apply(int32_t lane, absl::Span<const ApplyItem> items,
                     std::vector<std::string> names, absl::Time deadline) override;
  absl::Status Finish(absl::Time deadline) override;
  absl::Status StartDigests(int32_t slots) override;
  absl::Status AddDigest(int32_t lane, absl::Span<const DigestItem> items,
                         absl::Time deadline) override;
  absl::StatusOr<std::vector<uint64_t>> TakeDigests(absl::Time deadline) override;
  WaveOpsTimes TakeTimes() override {
    origin_set_ = false;
    return std::exchange(times_, WaveOpsTimes());
  }

 private:
  absl::StatusOr<Lane*> Get(int32_t lane) {
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("delta: lane ", lane, " of ", lanes_.size()));
    }
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(o_.device));
    return &lanes_[lane];
  }
  // Polls `e` until it completed: spins at first (a wave's counts are
  // back within microseconds), then sleeps between polls.
  absl::Status Wait(cudaEvent_t e, absl::Time deadline, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return CudaStatus(q, what);
      REFIT_RETURN_IF_ERROR(t_->CheckCancelled());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(what, ": not complete by the deadline"));
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(2)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  // The checks of the apply last run in `a` (complete: its event waited).
  void TakeChecks(ApplySlot& l) {
    const auto* bad = reinterpret_cast<const uint32_t*>(l.bad_h.p);
    for (int64_t i = 0; i < l.pending_msgs && bad != nullptr; ++i) {
      if (bad[i] != 0 && failure_.ok()) {
        failure_ = absl::DataLossError(absl::StrCat(
            i < static_cast<int64_t>(l.pending.size()) ? l.pending[i] : "",
            ": delta message: an index is past the message's end or not increasing, or the "
            "bitmask disagrees with its count (nothing of its wave was applied)"));
      }
    }
    l.pending.clear();
    l.pending_msgs = 0;
  }

  // Adds c's last encode to times_ (its `encoded` completed).
  void TimeEncode(CountSlot& c) {
    float ms = 0;
    if (c.encode_timed && cudaEventElapsedTime(&ms, c.gathering, c.encoded) == cudaSuccess) {
      times_.encode_seconds += ms * 1e-3;
    }
    c.encode_timed = false;
  }

  CudaLanes* t_;
  GpuWaveOpsOptions o_;
  WaveOpsTimes times_;
  // Recorded on the (idle) codec stream as the first count since the last
  // TakeTimes is enqueued, at the host's times_.origin: the counts'
  // windows from it.
  cudaEvent_t origin_ = nullptr;
  bool origin_set_ = false;
  std::vector<Lane> lanes_;
  absl::Status failure_;
  // INVALID_ARGUMENT for a run of an element size other than 1, 2, 4, 8,
  // not of whole elements or into a slot outside StartDigests'.
  absl::Status CheckDigestRun(const DigestItem& it) const;
  // Digest runs of `items` (checked) as rows, their tiles numbered from 0;
  // *tiles their count.
  absl::StatusOr<std::vector<WaveDigestRun>> DigestRuns(absl::Span<const DigestItem> items,
                                                        int64_t* tiles);
  // Uploads `runs` into the next table, on `stream`; returns its rows.
  absl::StatusOr<const WaveDigestRun*> UploadRuns(const std::vector<WaveDigestRun>& runs,
                                                  cudaStream_t stream);

  std::vector<Mem> retired_;  // grown out of, freed by Finish
  // Verified rounds: the running sums (StartDigests), the tables of the
  // round's digests so far.
  Mem sums_, sums_h_{nullptr, 0, true};
  int32_t slots_ = 0;
  std::vector<DigestTable> tables_;
  size_t tables_used_ = 0;
};

}  // namespace gpu_wave_internal
}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_GPU_WAVE_OPS_INTERNAL_H_
