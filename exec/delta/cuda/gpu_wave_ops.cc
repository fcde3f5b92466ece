// The GPU DeltaWaveOps (see gpu_wave_ops.h): counts, encodes and applies
// (the digests: gpu_wave_digests.cc).
#include "exec/delta/cuda/gpu_wave_ops.h"

#include "exec/delta/cuda/gpu_wave_ops_internal.h"

namespace refit {
namespace gpu_wave_internal {

namespace {

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

}  // namespace

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
  TimeEncode(c);
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
    const bool fused = counted && it.digest.size() == 1 &&
                       it.digest[0].data == it.cur && it.digest[0].bytes == it.bytes &&
                       (it.digest[0].first_key & 15) == 0;
    if (!fused) other_runs.insert(other_runs.end(), it.digest.begin(), it.digest.end());
    if (!counted) continue;
    WaveMsg m;
    if (fused) {
      REFIT_RETURN_IF_ERROR(CheckDigestRun(it.digest[0]));
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
  c.msgs = std::move(msgs);
  if (c.msgs.empty()) return absl::OkStatus();
  cudaStream_t codec = l->codec;
  if (!origin_set_) {
    times_.origin = absl::Now();
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(origin_, codec));
    origin_set_ = true;
  }
  REFIT_RETURN_IF_ERROR(
      c.mask.Reserve(c.num_tiles * kWaveMaskWordsPerTile * 4, "mask", &retired_));
  REFIT_RETURN_IF_ERROR(
      c.vals.Reserve(c.num_tiles * kWaveValueBytesPerTile, "values", &retired_));
  REFIT_RETURN_IF_ERROR(c.idx.Reserve(c.num_tiles * kWaveIndexSlots * 4, "indices", &retired_));
  REFIT_RETURN_IF_ERROR(c.counts.Reserve(c.num_tiles * 4, "tile counts", &retired_));
  REFIT_RETURN_IF_ERROR(c.offsets.Reserve(c.num_tiles * 8 + 8, "tile offsets", &retired_));
  // The totals, then the mask kernel's two counters (LaunchWaveMask): the
  // kernel leaves them zeroed, a block of its own is zeroed once.
  const char* had = c.totals.p;
  REFIT_RETURN_IF_ERROR(c.totals.Reserve(c.num_msgs * 8 + 16, "totals", &retired_));
  if (c.totals.p != had) {
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(c.totals.p, 0, c.totals.cap, codec));
  }
  REFIT_RETURN_IF_ERROR(c.totals_h.Reserve(c.num_msgs * 8, "totals", &retired_));
  const auto nm = static_cast<int32_t>(c.num_msgs);
  WaveRows rows;
  if (nm <= kWaveInlineMsgs) {
    rows = InlineWaveRows(c.msgs.data(), nm);  // in the launch: nothing to upload
  } else {
    // The slot's last encode is done (waited above): its rows may be
    // written beside the count running now.
    const int64_t mb = c.num_msgs * sizeof(WaveMsg);
    REFIT_RETURN_IF_ERROR(c.table_h.Reserve(mb, "tables", &retired_));
    REFIT_RETURN_IF_ERROR(c.table.Reserve(mb, "tables", &retired_));
    std::memcpy(c.table_h.p, c.msgs.data(), mb);
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(c.table.p, c.table_h.p, mb, cudaMemcpyHostToDevice, l->upload));
    REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.uploaded, l->upload));
    REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(codec, c.uploaded, 0));
    rows = DeviceWaveRows(reinterpret_cast<const WaveMsg*>(c.table.p), nm);
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.began, codec));
  auto* counts = reinterpret_cast<uint32_t*>(c.counts.p);
  auto* totals = reinterpret_cast<uint64_t*>(c.totals.p);
  WaveMaskOut out;
  out.mask = reinterpret_cast<uint32_t*>(c.mask.p);
  out.tile_counts = counts;
  out.vals = reinterpret_cast<uint8_t*>(c.vals.p);
  out.idx = reinterpret_cast<uint32_t*>(c.idx.p);
  out.totals = totals;
  out.claim = reinterpret_cast<unsigned long long*>(totals + c.num_msgs);
  // Pinned host memory, written by the kernel (unified addressing: the
  // host pointer is the device's).
  out.totals_out = reinterpret_cast<uint64_t*>(c.totals_h.p);
  LaunchWaveMask(rows, c.num_tiles, out, codec,
                 any_fused ? reinterpret_cast<unsigned long long*>(sums_.p) : nullptr);
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  // The totals are on the host when the kernel ends.
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.counted, codec));
  // The tiles' offsets for the gather, while the host builds the headers
  // (off the encode's path).
  auto* offsets = reinterpret_cast<uint64_t*>(c.offsets.p);
  LaunchTileScan(counts, c.num_tiles, offsets, offsets + c.num_tiles, codec);
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.scanned, codec));
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
  float from = 0, to = 0;
  if (cudaEventElapsedTime(&from, origin_, c.began) == cudaSuccess &&
      cudaEventElapsedTime(&to, origin_, c.counted) == cudaSuccess) {
    times_.count_windows.push_back({from * 1e-3, to * 1e-3});
  }
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
  // The gather runs on its own stream, after the count and its scan (the
  // same stream: the scan's event covers both).
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaStreamWaitEvent(l->gather, c.num_msgs > 0 ? c.scanned : c.counted, 0));
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.gathering, l->gather));
  c.encode_timed = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const int32_t j = c.msg_of_item[i];
    const auto e = static_cast<DeltaEncoding>(headers[i].encoding);
    if (e != DeltaEncoding::kDense && j < 0) {
      return absl::InvalidArgumentError("delta encode: a delta needs a snapshot");
    }
    if (j < 0) continue;
    c.msgs[j].encoding = static_cast<int32_t>(e);
    c.msgs[j].changed = static_cast<int64_t>(headers[i].num_changed);
    c.msgs[j].out = reinterpret_cast<uint8_t*>(out[i]);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const auto nm = static_cast<int32_t>(c.num_msgs);
  WaveRows rows;
  WaveHeaders heads;
  heads.out = reinterpret_cast<uint8_t*>(header_out);
  heads.bytes = n * kHeader;
  if (nm <= kWaveInlineMsgs && heads.bytes <= kWaveInlineHeaderBytes) {
    // Rows and headers in the gather's launch: nothing to upload.
    rows = InlineWaveRows(c.msgs.data(), nm);
    std::memcpy(heads.inline_bytes, headers.data(), heads.bytes);
  } else {
    // One upload: the rows, and behind them the headers.
    const int64_t mb = c.num_msgs * sizeof(WaveMsg);
    REFIT_RETURN_IF_ERROR(c.table_h.Reserve(mb + heads.bytes, "tables", &retired_));
    REFIT_RETURN_IF_ERROR(c.table.Reserve(mb + heads.bytes, "tables", &retired_));
    std::memcpy(c.table_h.p, c.msgs.data(), mb);
    std::memcpy(c.table_h.p + mb, headers.data(), heads.bytes);
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(c.table.p, c.table_h.p, mb + heads.bytes,
                                               cudaMemcpyHostToDevice, l->gather));
    rows = DeviceWaveRows(reinterpret_cast<const WaveMsg*>(c.table.p), nm);
    heads.device = reinterpret_cast<const uint8_t*>(c.table.p) + mb;
  }
  LaunchWaveGather(rows, c.num_tiles, reinterpret_cast<const uint32_t*>(c.mask.p),
                   reinterpret_cast<const uint32_t*>(c.counts.p),
                   reinterpret_cast<const uint64_t*>(c.offsets.p),
                   reinterpret_cast<const uint8_t*>(c.vals.p),
                   reinterpret_cast<const uint32_t*>(c.idx.p), heads, l->gather);
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  (void)deadline;
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(c.encoded, l->gather));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(l->stream, c.encoded, 0));
  return absl::OkStatus();
}

absl::Status GpuWaveOps::Apply(int32_t lane, absl::Span<const ApplyItem> items,
                               std::vector<std::string> names, absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(Lane * l, Get(lane));
  ApplySlot& a = l->applies[l->next_apply];
  l->next_apply ^= 1;
  REFIT_RETURN_IF_ERROR(Wait(a.applied, deadline, "delta apply"));
  TakeChecks(a);
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
    REFIT_RETURN_IF_ERROR(a.apply_h.Reserve(mb, "apply tables", &retired_));
    REFIT_RETURN_IF_ERROR(a.apply.Reserve(mb, "apply tables", &retired_));
    REFIT_RETURN_IF_ERROR(a.counts.Reserve(nt * 4 + 4, "apply counts", &retired_));
    REFIT_RETURN_IF_ERROR(a.offsets.Reserve(nt * 8 + 8, "apply offsets", &retired_));
    REFIT_RETURN_IF_ERROR(a.bad.Reserve((nm + 1) * 4, "apply checks", &retired_));
    REFIT_RETURN_IF_ERROR(a.bad_h.Reserve((nm + 1) * 4, "apply checks", &retired_));
    std::memcpy(a.apply_h.p, msgs.data(), mb);
    const auto* dmsgs = reinterpret_cast<const WaveMsg*>(a.apply.p);
    const auto nmsgs = static_cast<int32_t>(nm);
    auto* counts = reinterpret_cast<uint32_t*>(a.counts.p);
    auto* offsets = reinterpret_cast<uint64_t*>(a.offsets.p);
    auto* bad = reinterpret_cast<uint32_t*>(a.bad.p);
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(a.apply.p, a.apply_h.p, mb, cudaMemcpyHostToDevice, l->stream));
    REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(bad, 0, (nm + 1) * 4, l->stream));
    LaunchWaveApplyCount(dmsgs, nmsgs, nt, counts, bad, bad + nm, l->stream);
    if (nt > 0) LaunchTileScan(counts, nt, offsets, offsets + nt, l->stream);
    LaunchWaveApplyCheck(dmsgs, nm, counts, offsets, bad, bad + nm, l->stream);
    LaunchWaveScatter(dmsgs, nmsgs, nt, offsets, bad + nm, l->stream);
    REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
    REFIT_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(a.bad_h.p, bad, (nm + 1) * 4, cudaMemcpyDeviceToHost, l->stream));
    a.pending = std::move(kept);
    a.pending_msgs = nm;
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaEventRecord(a.applied, l->stream));
  return absl::OkStatus();
}

absl::Status GpuWaveOps::Finish(absl::Time deadline) {
  for (int32_t i = 0; i < static_cast<int32_t>(lanes_.size()); ++i) {
    REFIT_ASSIGN_OR_RETURN(Lane * l, Get(i));
    for (ApplySlot& a : l->applies) {
      REFIT_RETURN_IF_ERROR(Wait(a.applied, deadline, "delta apply"));
      TakeChecks(a);
    }
    for (CountSlot& c : l->slots) {
      REFIT_RETURN_IF_ERROR(Wait(c.encoded, deadline, "delta encode"));
      TimeEncode(c);
    }
  }
  // Every lane waited for: the device is idle for this member's work.
  for (Mem& m : retired_) m.Release();
  retired_.clear();
  absl::Status s = failure_;
  failure_ = absl::OkStatus();
  return s;
}

}  // namespace gpu_wave_internal
absl::StatusOr<std::unique_ptr<DeltaWaveOps>> MakeGpuWaveOps(CudaLanes* lanes,
                                                             GpuWaveOpsOptions options) {
  if (lanes == nullptr || lanes->num_lanes() < 1) {
    return absl::InvalidArgumentError("delta: GPU ops need a device transport's lanes");
  }
  auto ops = std::make_unique<gpu_wave_internal::GpuWaveOps>(lanes, options);
  REFIT_RETURN_IF_ERROR(ops->Init());
  return std::unique_ptr<DeltaWaveOps>(std::move(ops));
}

}  // namespace refit
