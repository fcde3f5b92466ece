// DeltaRunner's staging (see delta_runner.h, Staging): one lane room per
// lane within the plan's staging budget, taken by the lane's batches in
// turn (packed messages, then encodings), and a relay's ring of kept
// payloads in the rest of the budget.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/round_up.h"
#include "common/status_macros.h"
#include "exec/delta/delta_room.h"
#include "exec/delta/delta_runner.h"
#include "plan/delta_lane.h"

namespace refit {
namespace {

// Per peer of `msgs` (grouped as `peers`): the encoded bytes the pair may
// carry in a batch (PairCodedCap, with the pair's bound: PairBound; the
// receiver packs what is not contiguous on the engine side), and the most
// the pair's encodings take (each payload below its message's bytes,
// rounded up to 16), summed into *most.
template <typename Msgs>
void PairCaps(const Plan& plan, const Msgs& msgs,
              const std::vector<std::pair<int32_t, int32_t>>& peers, int64_t room,
              int64_t window, int64_t wave_bytes, std::vector<int64_t>* caps, int64_t* most) {
  caps->clear();
  size_t at = 0;
  for (const auto& [peer, count] : peers) {
    int64_t bytes = 0, largest = 0, staged = 0, coded = 0;
    for (int32_t i = 0; i < count; ++i, ++at) {
      const Message& m = plan.messages[msgs[at].message];
      bytes += m.bytes;
      largest = std::max(largest, m.bytes);
      if (!m.dst_contiguous) staged += TightStagingBytes(m.bytes);
      coded += RoundUp(m.bytes, 16);
    }
    const int64_t bound = PairBound(plan.options, window, wave_bytes, bytes, largest);
    caps->push_back(PairCodedCap(room, bound, bytes, staged));
    *most += std::min(caps->back(), coded);
  }
}

}  // namespace

int64_t DeltaRunner::BatchWindow(const Plan& plan) {
  // Relays: every plan wave its own batch, in the plan's order (a forward
  // after the wave that brought its bytes).
  for (const Message& m : plan.messages) {
    if (m.relay) return 0;
  }
  return std::max<int64_t>(1, DeltaLaneRoom(plan.options) / 2);
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
        at += RoundUp(m.bytes, align);
      }
    }
    w.staging_bytes = at;
    if (at <= limit) return;
  }
}

absl::Status DeltaRunner::PlanRooms(const Plan& plan) {
  room_ = DeltaLaneRoom(plan.options);
  const int32_t lanes = transport_->num_lanes();
  lane_room_bytes_.assign(lanes, 0);
  const bool src = side_ == Side::kTrainer;
  for (size_t k = 0; k < work_.size(); ++k) {
    BatchWork& w = work_[k];
    // The most this rank's encodings take: a trainer's to its engines, an
    // engine's from its senders (a relay's repeats wait in the ring).
    int64_t most = 0, unused = 0;
    PairCaps(plan, w.msgs, w.peers, room_, w.window, w.wave_bytes, &w.peer_caps, &most);
    PairCaps(plan, w.forwards, w.forward_peers, room_, w.window, w.wave_bytes, &w.forward_caps,
             &unused);
    // A trainer quantizes its converted messages' rows, one message at a
    // time and each in steps, past its packed messages (where its
    // encodings later go): it packs them tighter where aligning them
    // would leave less than the planner keeps for that (QuantizeRoom),
    // and sizes the steps to at most that and what they leave.
    bool converts = false;
    for (const MsgWork& m : w.msgs) converts = converts || m.converted;
    const int64_t limit = room_ - 16 - most, quantize = QuantizeRoom(plan.options);
    LayOutStaging(w, converts ? std::min(limit, room_ - 256 - quantize) : limit);
    w.coded_offset = RoundUp(w.staging_bytes, 16);
    w.convert_offset = RoundUp(w.staging_bytes, 256);
    w.convert_bytes = 0;
    for (MsgWork& m : w.msgs) {
      if (!m.converted) continue;
      w.convert_bytes = std::max(
          w.convert_bytes, StepConversions(m, std::min(quantize, room_ - w.convert_offset)));
    }
    // A trainer sends dense what does not fit its room; an engine must
    // hold whatever its senders may send.
    const int64_t need = !src                ? w.coded_offset + most
                         : w.convert_bytes > 0 ? w.convert_offset + w.convert_bytes
                                               : w.staging_bytes;
    if (need > room_) {
      const int64_t lanes_per_budget =
          std::max<int64_t>(1, plan.options.staging_budget_bytes / room_);
      return absl::InvalidArgumentError(absl::StrCat(
          SideName(side_), " rank ", rank_, ": the plan's staging budget (staging_budget_bytes, "
          "--staging_mib) of ", plan.options.staging_budget_bytes, " bytes leaves each of its ",
          lanes, " lanes ", room_, " bytes for a delta batch",
          plan.options.relay ? " (half the lane's share: relays keep payloads in the rest)" : "",
          ", less than batch ", k, " on lane ", w.lane, " needs: ", w.staging_bytes,
          " bytes of staging",
          w.convert_bytes > 0
              ? absl::StrCat(" and ", w.convert_bytes, " to quantize in (its largest step)")
              : "",
          src ? "" : absl::StrCat(" and up to ", most, " of encodings"),
          "; plan with a staging budget of at least ", need * lanes_per_budget, " bytes"));
    }
    w.coded_room = std::max<int64_t>(0, std::min(room_ - w.coded_offset, most));
    lane_room_bytes_[w.lane] =
        std::max(lane_room_bytes_[w.lane], std::min(room_, w.coded_offset + most));
    lane_room_bytes_[w.lane] = std::max(lane_room_bytes_[w.lane], src ? need : w.staging_bytes);
  }
  // A relay's ring: what the lanes leave of the budget, at most what it
  // may keep in one round.
  for (const BatchWork& w : work_) {
    for (const MsgWork& m : w.msgs) {
      if (m.repeats > 0) ring_bytes_ += RoundUp(m.bytes, 16);
    }
  }
  int64_t lanes_total = 0;
  for (int64_t b : lane_room_bytes_) lanes_total += b;
  ring_bytes_ = std::max<int64_t>(
      0, std::min(ring_bytes_, plan.options.staging_budget_bytes - lanes_total));
  if (ring_bytes_ < 16) ring_bytes_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<char*> DeltaRunner::Hold(int64_t bytes) {
  REFIT_ASSIGN_OR_RETURN(char* p, copier_->Allocate(bytes));
  budget_held_ += bytes;
  return p;
}

absl::Status DeltaRunner::AllocateRooms() {
  const int32_t lanes = transport_->num_lanes();
  lane_room_.assign(lanes, nullptr);
  lane_use_.assign(lanes, 0);
  lane_used_.assign(lanes, false);
  posted_.assign(lanes, 0);
  done_.assign(lanes, 0);
  for (int32_t lane = 0; lane < lanes; ++lane) {
    if (lane_room_bytes_[lane] == 0) continue;
    REFIT_ASSIGN_OR_RETURN(lane_room_[lane], Hold(lane_room_bytes_[lane]));
  }
  if (ring_bytes_ > 0) {
    REFIT_ASSIGN_OR_RETURN(ring_, Hold(ring_bytes_));
  }
  for (BatchWork& w : work_) {
    if (w.staging_bytes > 0) w.staging = lane_room_[w.lane];
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
  REFIT_RETURN_IF_ERROR(SyncConversions(lane));
  return ops_->Sync(lane, deadline);
}

absl::Status DeltaRunner::DrainLane(int32_t lane, absl::Time deadline) {
  while (in_flight_[lane] > 0) {
    REFIT_RETURN_IF_ERROR(transport_->WaitWave(lane, deadline));
    --in_flight_[lane];
    ++done_[lane];
  }
  return absl::OkStatus();
}

absl::Status DeltaRunner::ClaimFor(BatchWork& w, absl::Time deadline) {
  if (w.claimed) return absl::OkStatus();
  w.claimed = true;
  REFIT_RETURN_IF_ERROR(ClaimLane(w.lane, deadline));
  NoteLaneUse(w, 0);
  return absl::OkStatus();
}

absl::StatusOr<char*> DeltaRunner::CodedFor(BatchWork& w, int64_t bytes) {
  if (bytes > w.coded_room) {
    return absl::InternalError(absl::StrCat(SideName(side_), " rank ", rank_, ": ", bytes,
                                            " bytes of encodings past the batch's room of ",
                                            w.coded_room));
  }
  if (w.claimed) NoteLaneUse(w, bytes);
  if (bytes == 0) return nullptr;
  return lane_room_[w.lane] + w.coded_offset;
}

void DeltaRunner::NoteLaneUse(const BatchWork& w, int64_t coded) {
  lane_use_[w.lane] = coded > 0 ? w.coded_offset + coded : w.staging_bytes;
  delta_stats_.staging_bytes = std::max(delta_stats_.staging_bytes, w.staging_bytes);
  delta_stats_.encoding_bytes = std::max(delta_stats_.encoding_bytes, coded);
  NoteUse();
}

void DeltaRunner::NoteUse() {
  int64_t used = ring_used_;
  for (int64_t b : lane_use_) used += b;
  delta_stats_.peak_used_bytes = std::max(delta_stats_.peak_used_bytes, used);
  delta_stats_.held_bytes = std::max(delta_stats_.held_bytes, ring_used_);
}

void DeltaRunner::RingReclaim() {
  while (!ring_order_.empty()) {
    Held& h = held_[ring_order_.front()];
    if (h.remaining > 0 || h.ticket < 0 || done_[h.lane] < h.ticket) return;
    ring_used_ -= h.bytes;
    h = Held();
    ring_order_.erase(ring_order_.begin());
  }
}

DeltaRunner::Held* DeltaRunner::RingTake(int32_t message, int64_t bytes, int32_t repeats) {
  const int64_t n = RoundUp(std::max<int64_t>(bytes, 1), 16);
  RingReclaim();
  int64_t at = -1;
  if (ring_order_.empty()) {
    if (n <= ring_bytes_) at = 0;
  } else {
    const int64_t front = held_[ring_order_.front()].offset;
    const Held& back = held_[ring_order_.back()];
    const int64_t end = back.offset + back.bytes;
    if (front <= back.offset) {  // one run [front, end): after it, or from the start
      if (end + n <= ring_bytes_) {
        at = end;
      } else if (n <= front) {
        at = 0;
      }
    } else if (end + n <= front) {  // wrapped: between the newest and the oldest
      at = end;
    }
  }
  if (at < 0) return nullptr;
  Held& h = held_[message];
  h = Held();
  h.data = ring_ + at;
  h.offset = at;
  h.bytes = n;
  h.valid = true;
  h.remaining = repeats;
  h.ticket = -1;
  ring_order_.push_back(message);
  ring_used_ += n;
  NoteUse();
  return &h;
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
  // Converted messages: quantized and packed one at a time.
  REFIT_RETURN_IF_ERROR(StageConverted(w));
  std::vector<ResolvedCopy> copies;
  for (const MsgWork& m : w.msgs) {
    if (m.direct != nullptr || m.converted) continue;
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> c, CurrentCopies(w, m));
    copies.insert(copies.end(), c.begin(), c.end());
  }
  REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, copies));
  if (!copier_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
  return absl::OkStatus();
}

}  // namespace refit
