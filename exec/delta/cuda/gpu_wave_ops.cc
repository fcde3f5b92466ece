// The GPU DeltaWaveOps (see gpu_wave_ops.h).
#include "exec/delta/cuda/gpu_wave_ops.h"

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
#include "exec/delta/cuda/growing_memory.h"

namespace refit {
namespace {

constexpr int64_t kHeader = sizeof(DeltaHeader);

using Mem = GrowingMemory;

// One count and its encode: the wave's message rows, mask, values, tile
// counts and offsets, per-message totals, headers. A lane has
// kMaxCountsInFlight of them; StartCount takes a free one.
struct CountSlot {
  cudaEvent_t counted = nullptr, encoded = nullptr;
  Mem table_h{nullptr, 0, true}, table, mask, vals, counts, offsets, totals,
      totals_h{nullptr, 0, true}, headers_h{nullptr, 0, true};
  std::vector<int32_t> msg_of_item;
  std::vector<int64_t> words_of_item;  // the count's items
  bool counting = false;
  int64_t num_msgs = 0, num_tiles = 0;
  std::vector<Mem*> mems() {
    return {&table_h, &table, &mask, &vals, &counts, &offsets, &totals, &totals_h, &headers_h};
  }
};

struct Lane {
  cudaStream_t stream = nullptr;  // the transport's
  cudaStream_t codec = nullptr;   // ours: counts
  // Ours: every other count when options.count_streams is 2 (a count's
  // start fills the SMs the last one's ending warps leave).
  cudaStream_t codec2 = nullptr;
  int next_codec = 0;
  // Ours, of the highest priority: encodes (gathers). A gather's blocks go
  // before the rest of the next wave's count, which is queued by then and
  // would otherwise hold every SM until it ends.
  cudaStream_t gather = nullptr;
  cudaEvent_t applied = nullptr, mark = nullptr;
  std::vector<CountSlot> slots;
  std::deque<int> started;  // slots counting, oldest first
  int finished = -1;  // the slot FinishCount returned last: Encode's
  // Apply.
  Mem apply_h{nullptr, 0, true}, apply, apply_counts, apply_offsets, bad, bad_h{nullptr, 0, true};
  std::vector<std::string> pending;  // names of the apply in flight
  int64_t pending_msgs = 0;
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
    for (Lane& l : lanes_) {
      if (l.codec != nullptr) cudaStreamSynchronize(l.codec);
      if (l.codec2 != nullptr) cudaStreamSynchronize(l.codec2);
      if (l.gather != nullptr) cudaStreamSynchronize(l.gather);
      if (l.digest != nullptr) cudaStreamSynchronize(l.digest);
      for (Mem* m : {&l.apply_h, &l.apply, &l.apply_counts, &l.apply_offsets, &l.bad, &l.bad_h,
                     &l.headers_in_h}) {
        m->Release();
      }
      for (CountSlot& c : l.slots) {
        for (Mem* m : c.mems()) m->Release();
        for (cudaEvent_t e : {c.counted, c.encoded}) {
          if (e != nullptr) cudaEventDestroy(e);
        }
      }
      for (cudaEvent_t e : {l.applied, l.mark}) {
        if (e != nullptr) cudaEventDestroy(e);
      }
      if (l.codec != nullptr) cudaStreamDestroy(l.codec);
      if (l.codec2 != nullptr) cudaStreamDestroy(l.codec2);
      if (l.gather != nullptr) cudaStreamDestroy(l.gather);
      if (l.digest != nullptr) cudaStreamDestroy(l.digest);
    }
    for (DigestTable& t : tables_) {
      t.host.Release();
      t.dev.Release();
    }
    sums_.Release();
    sums_h_.Release();
  }

  absl::Status Init() {
    REFIT_RETURN_IF_CUDA_ERROR(cudaSetDevice(o_.device));
    lanes_.resize(t_->num_lanes());
    for (int32_t i = 0; i < t_->num_lanes(); ++i) {
      Lane& l = lanes_[i];
      l.stream = static_cast<cudaStream_t>(t_->stream(i));
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.codec, cudaStreamNonBlocking));
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.codec2, cudaStreamNonBlocking));
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&l.digest, cudaStreamNonBlocking));
      int least = 0, greatest = 0;
      REFIT_RETURN_IF_CUDA_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      REFIT_RETURN_IF_CUDA_ERROR(
          cudaStreamCreateWithPriority(&l.gather, cudaStreamNonBlocking, greatest));
      for (cudaEvent_t* e : {&l.applied, &l.mark}) {
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
      }
      l.slots.resize(kMaxCountsInFlight);
      for (CountSlot& c : l.slots) {
        for (cudaEvent_t* e : {&c.counted, &c.encoded}) {
          REFIT_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        }
        // Nothing in flight yet: the events count as done.
        REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.encoded, l.codec));
      }
      REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l.applied, l.codec));
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
    REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->codec2, l->mark, 0));
    return absl::OkStatus();
  }

  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
    for (cudaStream_t s : {l->stream, l->codec, l->codec2, l->gather, l->digest}) {
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
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(l->headers_in_h.p, src, n * kHeader,
                                               cudaMemcpyDefault, l->stream));
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->mark, l->stream));
    REFIT_RETURN_IF_ERROR(Wait(l->mark, deadline, "delta headers"));
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
  // The checks of the apply last run on `l` (complete: its event waited).
  void TakeChecks(Lane& l) {
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

  CudaLanes* t_;
  GpuWaveOpsOptions o_;
  std::vector<Lane> lanes_;
  absl::Status failure_;
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

absl::Status CheckItem(const EncodeItem& it) {
  const int w = it.word_bytes;
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return absl::InvalidArgumentError(absl::StrCat("delta: word size ", w, " is not 1, 2, 4 or 8"));
  }
  if (it.bytes < 0 || it.bytes % w != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta: ", it.bytes, " bytes are not a whole number of ", w, "-byte words"));
  }
  return absl::OkStatus();
}

absl::Status GpuWaveOps::StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                                    absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  // A slot neither counting nor awaiting its encode, one whose last encode
  // ended if there is one (the fewest slots, so the least scratch, in use).
  int si = -1;
  for (int i = 0; i < kMaxCountsInFlight; ++i) {
    if (l->slots[i].counting || i == l->finished) continue;
    if (si < 0) si = i;
    if (cudaEventQuery(l->slots[i].encoded) == cudaSuccess) {
      si = i;
      break;
    }
  }
  if (si < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "delta: more than ", kMaxCountsInFlight, " counts in flight on lane ", lane));
  }
  CountSlot& c = l->slots[si];
  // The slot's previous encode has read its tables, mask and values.
  REFIT_RETURN_IF_ERROR(Wait(c.encoded, deadline, "delta encode"));
  std::vector<WaveMsg> msgs;
  int64_t num_tiles = 0;
  c.msg_of_item.assign(items.size(), -1);
  // Digest runs the count does not digest itself (a pass of their own).
  std::vector<DigestItem> other_runs;
  bool any_fused = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const EncodeItem& it = items[i];
    REFIT_RETURN_IF_ERROR(CheckItem(it));
    for (const DigestItem& d : it.digest) {
      if (d.data < it.cur || d.bytes < 0 || d.data + d.bytes > it.cur + it.bytes) {
        return absl::InvalidArgumentError("digest: a run outside its message's bytes");
      }
    }
    const bool counted = it.snap != nullptr && it.bytes > 0;
    // The count digests a message that is one run from a 16-byte word's key.
    const bool fused = o_.fused_digest && counted && it.digest.size() == 1 &&
                       it.digest[0].data == it.cur && it.digest[0].bytes == it.bytes &&
                       (it.digest[0].first_key & 15) == 0;
    if (!fused) other_runs.insert(other_runs.end(), it.digest.begin(), it.digest.end());
    if (!counted) continue;
    WaveMsg m;
    if (fused) {
      int64_t tiles = 0;  // checks the run's element size and slot
      REFIT_RETURN_IF_ERROR(DigestRuns(it.digest, &tiles).status());
      any_fused = true;
      m.digest_slot = it.digest[0].slot;
      m.digest_key = it.digest[0].first_key;
    }
    m.cur = reinterpret_cast<const uint8_t*>(it.cur);
    m.snap = reinterpret_cast<const uint8_t*>(it.snap);
    m.bytes = it.bytes;
    m.word = it.word_bytes;
    m.first_tile = num_tiles;
    const int64_t nt = WaveEncodeTiles(it.bytes);
    if (nt > (int64_t{1} << 31) - 1 - num_tiles) {
      return absl::InvalidArgumentError("delta: a wave of more than 2^31 tiles");
    }
    num_tiles += nt;
    c.msg_of_item[i] = static_cast<int32_t>(msgs.size());
    msgs.push_back(m);
  }
  c.num_msgs = static_cast<int64_t>(msgs.size());
  c.num_tiles = num_tiles;
  c.words_of_item.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) c.words_of_item[i] = items[i].bytes / items[i].word_bytes;
  REFIT_RETURN_IF_ERROR(AddDigest(lane, other_runs, deadline));
  c.counting = true;
  l->started.push_back(si);
  if (msgs.empty()) return absl::OkStatus();
  const int64_t mb = c.num_msgs * sizeof(WaveMsg);
  cudaStream_t codec = l->codec;
  if (o_.count_streams == 2) {
    codec = l->next_codec == 0 ? l->codec : l->codec2;
    l->next_codec ^= 1;
  }
  REFIT_RETURN_IF_ERROR(c.table_h.Reserve(mb, "tables", &retired_));
  REFIT_RETURN_IF_ERROR(c.table.Reserve(mb, "tables", &retired_));
  REFIT_RETURN_IF_ERROR(
      c.mask.Reserve(c.num_tiles * kWaveMaskWordsPerTile * 4, "mask", &retired_));
  if (o_.mask.values) {
    REFIT_RETURN_IF_ERROR(
        c.vals.Reserve(c.num_tiles * kWaveValueBytesPerTile, "values", &retired_));
  }
  REFIT_RETURN_IF_ERROR(c.counts.Reserve(c.num_tiles * 4, "tile counts", &retired_));
  REFIT_RETURN_IF_ERROR(c.offsets.Reserve(c.num_tiles * 8 + 8, "tile offsets", &retired_));
  REFIT_RETURN_IF_ERROR(c.totals.Reserve(c.num_msgs * 8, "totals", &retired_));
  REFIT_RETURN_IF_ERROR(c.totals_h.Reserve(c.num_msgs * 8, "totals", &retired_));
  std::memcpy(c.table_h.p, msgs.data(), mb);
  const auto* dmsgs = reinterpret_cast<const WaveMsg*>(c.table.p);
  const auto nm = static_cast<int32_t>(c.num_msgs);
  auto* counts = reinterpret_cast<uint32_t*>(c.counts.p);
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(c.table.p, c.table_h.p, mb, cudaMemcpyHostToDevice, codec));
  auto* totals = reinterpret_cast<uint64_t*>(c.totals.p);
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(totals, 0, c.num_msgs * 8, codec));
  LaunchWaveMask(dmsgs, nm, c.num_tiles, reinterpret_cast<uint32_t*>(c.mask.p), counts,
                 reinterpret_cast<uint8_t*>(c.vals.p), totals, codec, o_.mask,
                 any_fused ? reinterpret_cast<unsigned long long*>(sums_.p) : nullptr);
  if (o_.scan_with_count) {
    auto* offsets = reinterpret_cast<uint64_t*>(c.offsets.p);
    LaunchTileScan(counts, c.num_tiles, offsets, offsets + c.num_tiles, codec);
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(c.totals_h.p, c.totals.p, c.num_msgs * 8,
                                             cudaMemcpyDeviceToHost, codec));
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.counted, codec));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> GpuWaveOps::FinishCount(int32_t lane, absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  if (l->started.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("delta: no count started on lane ", lane));
  }
  const int si = l->started.front();
  l->started.pop_front();
  CountSlot& c = l->slots[si];
  c.counting = false;
  l->finished = si;
  std::vector<int64_t> out = c.words_of_item;
  if (c.num_msgs == 0) return out;
  REFIT_RETURN_IF_ERROR(Wait(c.counted, deadline, "delta count"));
  const auto* totals = reinterpret_cast<const uint64_t*>(c.totals_h.p);
  for (size_t i = 0; i < out.size(); ++i) {
    if (c.msg_of_item[i] >= 0) out[i] = static_cast<int64_t>(totals[c.msg_of_item[i]]);
  }
  return out;
}

absl::Status GpuWaveOps::Encode(int32_t lane, absl::Span<const EncodeItem> items,
                                absl::Span<const DeltaHeader> headers,
                                absl::Span<char* const> out, char* header_out,
                                absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  if (l->finished < 0) {
    return absl::FailedPreconditionError(absl::StrCat("delta: no count finished on lane ", lane));
  }
  CountSlot& c = l->slots[l->finished];
  l->finished = -1;
  if (headers.size() != items.size() || out.size() != items.size() ||
      c.msg_of_item.size() != items.size()) {
    return absl::InvalidArgumentError("delta encode: items, headers and outputs disagree");
  }
  // FinishCount waited for the count: the slot's host tables are free. The
  // gather runs on its own stream, after the count.
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->gather, c.counted, 0));
  auto* msgs = reinterpret_cast<WaveMsg*>(c.table_h.p);
  for (size_t i = 0; i < items.size(); ++i) {
    const int32_t j = c.msg_of_item[i];
    const auto e = static_cast<DeltaEncoding>(headers[i].encoding);
    if (e != DeltaEncoding::kDense && j < 0) {
      return absl::InvalidArgumentError("delta encode: a delta needs a snapshot");
    }
    if (j < 0) continue;
    msgs[j].encoding = static_cast<int32_t>(e);
    msgs[j].changed = static_cast<int64_t>(headers[i].num_changed);
    msgs[j].out = reinterpret_cast<uint8_t*>(out[i]);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  REFIT_RETURN_IF_ERROR(
      c.headers_h.Reserve(std::max<int64_t>(n, 1) * kHeader, "headers", &retired_));
  std::memcpy(c.headers_h.p, headers.data(), n * kHeader);
  if (n > 0) {
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(header_out, c.headers_h.p, n * kHeader,
                                               cudaMemcpyHostToDevice, l->gather));
  }
  if (c.num_msgs > 0) {
    const int64_t mb = c.num_msgs * sizeof(WaveMsg);
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(c.table.p, c.table_h.p, mb, cudaMemcpyHostToDevice, l->gather));
    // The tiles' offsets for the gather (the count needed only the totals).
    auto* offsets = reinterpret_cast<uint64_t*>(c.offsets.p);
    if (!o_.scan_with_count) {
      LaunchTileScan(reinterpret_cast<const uint32_t*>(c.counts.p), c.num_tiles, offsets,
                     offsets + c.num_tiles, l->gather);
    }
    LaunchWaveGather(reinterpret_cast<const WaveMsg*>(c.table.p),
                     static_cast<int32_t>(c.num_msgs), c.num_tiles,
                     reinterpret_cast<const uint32_t*>(c.mask.p),
                     reinterpret_cast<const uint32_t*>(c.counts.p),
                     reinterpret_cast<const uint64_t*>(c.offsets.p),
                     o_.mask.values ? reinterpret_cast<const uint8_t*>(c.vals.p) : nullptr,
                     l->gather);
    REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  }
  (void)deadline;
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.encoded, l->gather));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->stream, c.encoded, 0));
  return absl::OkStatus();
}

absl::Status GpuWaveOps::Apply(int32_t lane, absl::Span<const ApplyItem> items,
                               std::vector<std::string> names, absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  REFIT_RETURN_IF_ERROR(Wait(l->applied, deadline, "delta apply"));
  TakeChecks(*l);
  std::vector<WaveMsg> msgs;
  int64_t num_tiles = 0;
  std::vector<std::string> kept;
  for (size_t i = 0; i < items.size(); ++i) {
    const ApplyItem& it = items[i];
    const DeltaHeader& h = it.header;
    const int64_t bytes = static_cast<int64_t>(h.num_words) * h.word_bytes;
    const auto e = static_cast<DeltaEncoding>(h.encoding);
    if (e == DeltaEncoding::kDense) {
      if (bytes > 0 && it.payload != it.target) {
        REFIT_RETURN_IF_CUDA_ERROR(
            cudaMemcpyAsync(it.target, it.payload, bytes, cudaMemcpyDefault, l->stream));
      }
      continue;
    }
    WaveMsg m;
    m.cur = reinterpret_cast<const uint8_t*>(it.payload);
    m.out = reinterpret_cast<uint8_t*>(it.target);
    m.bytes = bytes;
    m.word = h.word_bytes;
    m.encoding = static_cast<int32_t>(e);
    m.changed = static_cast<int64_t>(h.num_changed);
    m.first_tile = num_tiles;
    num_tiles += e == DeltaEncoding::kIndices
                     ? (m.changed + kWaveIndicesPerTile - 1) / kWaveIndicesPerTile
                     : WaveEncodeTiles(bytes);
    msgs.push_back(m);
    kept.push_back(i < names.size() ? names[i] : "");
  }
  if (!msgs.empty()) {
    const int64_t nm = static_cast<int64_t>(msgs.size());
    const int64_t nt = num_tiles;
    const int64_t mb = nm * sizeof(WaveMsg);
    REFIT_RETURN_IF_ERROR(l->apply_h.Reserve(mb, "apply tables", &retired_));
    REFIT_RETURN_IF_ERROR(l->apply.Reserve(mb, "apply tables", &retired_));
    REFIT_RETURN_IF_ERROR(l->apply_counts.Reserve(nt * 4 + 4, "apply counts", &retired_));
    REFIT_RETURN_IF_ERROR(l->apply_offsets.Reserve(nt * 8 + 8, "apply offsets", &retired_));
    REFIT_RETURN_IF_ERROR(l->bad.Reserve((nm + 1) * 4, "apply checks", &retired_));
    REFIT_RETURN_IF_ERROR(l->bad_h.Reserve((nm + 1) * 4, "apply checks", &retired_));
    std::memcpy(l->apply_h.p, msgs.data(), mb);
    const auto* dmsgs = reinterpret_cast<const WaveMsg*>(l->apply.p);
    const auto nmsgs = static_cast<int32_t>(nm);
    auto* counts = reinterpret_cast<uint32_t*>(l->apply_counts.p);
    auto* offsets = reinterpret_cast<uint64_t*>(l->apply_offsets.p);
    auto* bad = reinterpret_cast<uint32_t*>(l->bad.p);
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l->apply.p, l->apply_h.p, mb, cudaMemcpyHostToDevice, l->stream));
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(bad, 0, (nm + 1) * 4, l->stream));
    LaunchWaveApplyCount(dmsgs, nmsgs, nt, counts, bad, bad + nm, l->stream);
    if (nt > 0) LaunchTileScan(counts, nt, offsets, offsets + nt, l->stream);
    LaunchWaveApplyCheck(dmsgs, nm, counts, offsets, bad, bad + nm, l->stream);
    LaunchWaveScatter(dmsgs, nmsgs, nt, offsets, bad + nm, l->stream);
    REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l->bad_h.p, bad, (nm + 1) * 4, cudaMemcpyDeviceToHost, l->stream));
    l->pending = std::move(kept);
    l->pending_msgs = nm;
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->applied, l->stream));
  return absl::OkStatus();
}

absl::Status GpuWaveOps::Finish(absl::Time deadline) {
  for (int32_t i = 0; i < static_cast<int32_t>(lanes_.size()); ++i) {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(i));
    REFIT_RETURN_IF_ERROR(Wait(l->applied, deadline, "delta apply"));
    for (CountSlot& c : l->slots) REFIT_RETURN_IF_ERROR(Wait(c.encoded, deadline, "delta encode"));
    TakeChecks(*l);
  }
  // Every lane waited for: the device is idle for this member's work.
  for (Mem& m : retired_) m.Release();
  retired_.clear();
  absl::Status s = failure_;
  failure_ = absl::OkStatus();
  return s;
}

absl::StatusOr<std::vector<WaveDigestRun>> GpuWaveOps::DigestRuns(
    absl::Span<const DigestItem> items, int64_t* tiles) {
  std::vector<WaveDigestRun> runs;
  *tiles = 0;
  for (const DigestItem& it : items) {
    const int w = it.element_bytes;
    if (w != 1 && w != 2 && w != 4 && w != 8) {
      return absl::InvalidArgumentError(absl::StrCat("digest: element size ", w));
    }
    if (it.bytes < 0 || it.bytes % w != 0 || it.slot < 0 || it.slot >= slots_) {
      return absl::InvalidArgumentError(absl::StrCat("digest: a run of ", it.bytes,
                                                     " bytes into slot ", it.slot, " of ",
                                                     slots_));
    }
    if (it.bytes == 0) continue;
    if (runs.size() >= static_cast<size_t>(INT32_MAX)) {
      return absl::InvalidArgumentError("digest: more than 2^31 runs");
    }
    runs.push_back({reinterpret_cast<const uint8_t*>(it.data), it.bytes, it.first_key, *tiles,
                    w, it.slot});
    *tiles += WaveEncodeTiles(it.bytes);
  }
  return runs;
}

absl::StatusOr<const WaveDigestRun*> GpuWaveOps::UploadRuns(
    const std::vector<WaveDigestRun>& runs, cudaStream_t stream) {
  if (tables_used_ == tables_.size()) tables_.emplace_back();
  DigestTable& t = tables_[tables_used_++];
  const int64_t rb = static_cast<int64_t>(runs.size() * sizeof(WaveDigestRun));
  // Every kernel that read this table ended at the last TakeDigests.
  REFIT_RETURN_IF_ERROR(t.host.Reserve(rb, "digest tables", &retired_));
  REFIT_RETURN_IF_ERROR(t.dev.Reserve(rb, "digest tables", &retired_));
  std::memcpy(t.host.p, runs.data(), rb);
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(t.dev.p, t.host.p, rb, cudaMemcpyHostToDevice, stream));
  return reinterpret_cast<const WaveDigestRun*>(t.dev.p);
}

absl::Status GpuWaveOps::StartDigests(int32_t slots) {
  if (slots < 0) return absl::InvalidArgumentError(absl::StrCat("digest: ", slots, " slots"));
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(0));
  // Every lane is idle (the caller's promise): the sums may move.
  REFIT_RETURN_IF_ERROR(sums_.Reserve(std::max(slots, 1) * 8, "digest sums", &retired_));
  REFIT_RETURN_IF_ERROR(sums_h_.Reserve(std::max(slots, 1) * 8, "digest sums", &retired_));
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(sums_.p, 0, std::max(slots, 1) * 8, l->codec));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(l->codec));
  slots_ = slots;
  tables_used_ = 0;
  return absl::OkStatus();
}

absl::Status GpuWaveOps::AddDigest(int32_t lane, absl::Span<const DigestItem> items,
                                   absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  (void)deadline;
  int64_t tiles = 0;
  REFIT_ASSIGN_OR_RETURN(std::vector<WaveDigestRun> runs, DigestRuns(items, &tiles));
  if (runs.empty()) return absl::OkStatus();
  // After what the lane holds now (the applies wrote what we digest), on
  // the lane's digest stream.
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->mark, l->stream));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->digest, l->mark, 0));
  REFIT_ASSIGN_OR_RETURN(const WaveDigestRun* rows, UploadRuns(runs, l->digest));
  LaunchWaveDigest(rows, static_cast<int32_t>(runs.size()), tiles,
                   reinterpret_cast<unsigned long long*>(sums_.p), l->digest);
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> GpuWaveOps::TakeDigests(absl::Time deadline) {
  for (int32_t i = 0; i < static_cast<int32_t>(lanes_.size()); ++i) {
    REFIT_RETURN_IF_ERROR(Sync(i, deadline));
  }
  std::vector<uint64_t> sums(static_cast<size_t>(slots_), 0);
  if (slots_ > 0) {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(0));
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(sums_h_.p, sums_.p, slots_ * 8, cudaMemcpyDeviceToHost, l->codec));
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(l->mark, l->codec));
    REFIT_RETURN_IF_ERROR(Wait(l->mark, deadline, "delta digest"));
    std::memcpy(sums.data(), sums_h_.p, slots_ * 8);
  }
  tables_used_ = 0;
  return sums;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeltaWaveOps>> MakeGpuWaveOps(CudaLanes* lanes,
                                                             GpuWaveOpsOptions options) {
  if (lanes == nullptr || lanes->num_lanes() < 1) {
    return absl::InvalidArgumentError("delta: GPU ops need a device transport's lanes");
  }
  auto ops = std::make_unique<GpuWaveOps>(lanes, options);
  REFIT_RETURN_IF_ERROR(ops->Init());
  return std::unique_ptr<DeltaWaveOps>(std::move(ops));
}

}  // namespace refit
