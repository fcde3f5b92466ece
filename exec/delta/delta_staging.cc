// DeltaRunner's staging (see delta_runner.h): one staging buffer and one
// encoding buffer per lane, taken by the lane's batches in turn, so a
// delta round's staging stays within the plan's staging budget however
// many bytes the member moves.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/delta/delta_runner.h"

namespace refit {
namespace {

int64_t AlignTo(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

int64_t DeltaRunner::BatchWindow(const Plan& plan, int64_t batch_bytes) {
  if (batch_bytes <= 0) return 0;
  // Relays: every plan wave its own batch, in the plan's order (a forward
  // after the wave that brought its bytes).
  for (const Message& m : plan.messages) {
    if (m.relay) return 0;
  }
  const int64_t share =
      plan.options.staging_budget_bytes / std::max<int32_t>(1, plan.options.num_lanes);
  return std::max<int64_t>(1, std::min(batch_bytes, share));
}

void DeltaRunner::LayOutStaging(BatchWork& w, int64_t limit) {
  // 256-byte aligned messages where they fit the limit, else 16, else 8
  // (a word is at most 8 bytes).
  // A relay's dense forwards packed after its received messages.
  for (int64_t align : {256, 16, 8}) {
    int64_t at = 0;
    for (std::vector<MsgWork>* msgs : {&w.msgs, &w.forwards}) {
      for (MsgWork& m : *msgs) {
        if (m.direct != nullptr) continue;
        m.stage_offset = at;
        at += AlignTo(m.bytes, align);
      }
    }
    w.staging_bytes = at;
    if (at <= limit) return;
  }
}

absl::Status DeltaRunner::AllocateStaging() {
  const int32_t lanes = transport_->num_lanes();
  lane_staging_.assign(lanes, nullptr);
  lane_staging_bytes_.assign(lanes, 0);
  lane_coded_.assign(lanes, nullptr);
  lane_coded_bytes_.assign(lanes, 0);
  lane_coded_cap_.assign(lanes, 0);
  lane_used_.assign(lanes, false);
  for (const BatchWork& w : work_) {
    lane_staging_bytes_[w.lane] = std::max(lane_staging_bytes_[w.lane], w.staging_bytes);
    // Encoded payloads are each smaller than the message, 16-byte aligned.
    lane_coded_cap_[w.lane] = std::max(
        lane_coded_cap_[w.lane], w.dense_bytes + 16 * static_cast<int64_t>(w.msgs.size()));
  }
  for (int32_t lane = 0; lane < lanes; ++lane) {
    if (lane_staging_bytes_[lane] == 0) continue;
    REFIT_ASSIGN_OR_RETURN(lane_staging_[lane], copier_->Allocate(lane_staging_bytes_[lane]));
  }
  for (BatchWork& w : work_) {
    if (w.staging_bytes > 0) w.staging = lane_staging_[w.lane];
  }
  return absl::OkStatus();
}

absl::Status DeltaRunner::ClaimLane(int32_t lane, absl::Time deadline) {
  if (!lane_used_[lane]) {
    lane_used_[lane] = true;
    return absl::OkStatus();
  }
  REFIT_RETURN_IF_ERROR(DrainLane(lane, deadline));
  REFIT_RETURN_IF_ERROR(copier_->Sync(lane, deadline));
  return ops_->Sync(lane, deadline);
}

absl::Status DeltaRunner::DrainLane(int32_t lane, absl::Time deadline) {
  while (in_flight_[lane] > 0) {
    REFIT_RETURN_IF_ERROR(transport_->WaitWave(lane, deadline));
    --in_flight_[lane];
  }
  return absl::OkStatus();
}

absl::Status DeltaRunner::ClaimFor(BatchWork& w, absl::Time deadline) {
  if (w.claimed) return absl::OkStatus();
  w.claimed = true;
  return ClaimLane(w.lane, deadline);
}

absl::StatusOr<char*> DeltaRunner::CodedFor(int32_t lane, int64_t bytes) {
  char*& p = lane_coded_[lane];
  int64_t& cap = lane_coded_bytes_[lane];
  if (bytes <= cap) return p;
  // Freed after the round (FreeRetired): freeing device memory waits for
  // the whole device, where a send of this round may wait for a peer that
  // waits for us.
  if (p != nullptr) {
    retired_.push_back(p);
    retired_bytes_ += cap;
  }
  p = nullptr;
  cap = 0;
  const int64_t bound = std::max(bytes, lane_coded_cap_[lane]);
  const int64_t want =
      std::min(bound, AlignTo(std::max(bytes + bytes / 4, lane_coded_cap_[lane] / 8), 256));
  REFIT_ASSIGN_OR_RETURN(p, ops_->Allocate(std::max(want, bytes)));
  cap = std::max(want, bytes);
  return p;
}

int64_t DeltaRunner::StagingBytes() const {
  int64_t n = 0;
  for (int64_t b : lane_staging_bytes_) n += b;
  return n;
}

int64_t DeltaRunner::EncodingBytes() const {
  int64_t n = retired_bytes_;
  for (int64_t b : lane_coded_bytes_) n += b;
  return n;
}

int64_t DeltaRunner::HeldBytes() const {
  int64_t n = StagingBytes() + EncodingBytes() + header_bytes_;
  for (const auto& [message, h] : held_) n += h.cap;
  if (conversions_ != nullptr) n += conversions_->scratch_bytes() + conversions_->workspace_bytes();
  return n;
}

absl::StatusOr<std::vector<ResolvedCopy>> DeltaRunner::CurrentCopies(const BatchWork& w,
                                                                     const MsgWork& m) const {
  char* place = w.staging + m.stage_offset;
  if (side_ == Side::kTrainer) return ResolveTasks(m.tasks, buffers_, {}, nullptr, place);
  std::vector<CopyTask> gather = m.tasks;  // the unpack, reversed
  for (CopyTask& t : gather) {
    std::swap(t.src_buffer, t.dst_buffer);
    std::swap(t.src_offset, t.dst_offset);
    std::swap(t.src_row_stride, t.dst_row_stride);
  }
  return ResolveTasks(gather, buffers_, {}, nullptr, place);
}

absl::Status DeltaRunner::StageCurrent(BatchWork& w, absl::Time deadline) {
  if (w.staging == nullptr) return absl::OkStatus();
  std::vector<ResolvedCopy> copies;
  for (const MsgWork& m : w.msgs) {
    if (m.direct != nullptr) continue;
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> c, CurrentCopies(w, m));
    copies.insert(copies.end(), c.begin(), c.end());
  }
  REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, copies));
  if (!copier_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
  return absl::OkStatus();
}

void DeltaRunner::FreeRetired() {
  for (char* p : retired_) ops_->Free(p);
  retired_.clear();
  retired_bytes_ = 0;
}

}  // namespace refit
