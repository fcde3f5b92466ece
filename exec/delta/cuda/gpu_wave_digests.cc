// The GPU wave ops' digests of verified rounds (gpu_wave_ops.h,
// region_digest.h): running sums per slot, added to beside the lanes'
// transfers.
#include "exec/delta/cuda/gpu_wave_ops_internal.h"

namespace refit {
namespace gpu_wave_internal {

absl::Status GpuWaveOps::CheckDigestRun(const DigestItem& it) const {
  const int w = it.element_bytes;
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return absl::InvalidArgumentError(absl::StrCat("digest: element size ", w));
  }
  if (it.bytes < 0 || it.bytes % w != 0 || it.slot < 0 || it.slot >= slots_) {
    return absl::InvalidArgumentError(absl::StrCat("digest: a run of ", it.bytes,
                                                   " bytes into slot ", it.slot, " of ", slots_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WaveDigestRun>> GpuWaveOps::DigestRuns(
    absl::Span<const DigestItem> items, int64_t* tiles) {
  std::vector<WaveDigestRun> runs;
  *tiles = 0;
  for (const DigestItem& it : items) {
    REFIT_RETURN_IF_ERROR(CheckDigestRun(it));
    const int w = it.element_bytes;
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

}  // namespace gpu_wave_internal
}  // namespace refit
