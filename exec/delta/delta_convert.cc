// DeltaRunner's quantized engines (see delta_runner.h, Quantized engines):
// a trainer rank's conversions, their amaxes exchanged once a round, each
// batch's records quantized into the front of its lane room on its lane.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/convert/amax_exchange.h"
#include "exec/delta/delta_runner.h"

namespace refit {
namespace {

int64_t AlignTo(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

bool IsScratch(const Plan& plan, int32_t b) {
  return b >= 0 && static_cast<size_t>(b) < plan.src.buffers.size() &&
         plan.src.buffers[b].scratch;
}

}  // namespace

absl::Status DeltaRunner::NoteConversions(const Plan& plan, const Message& m, MsgWork& mw) {
  REFIT_ASSIGN_OR_RETURN(std::vector<CopyTask> tasks, PackProgram(plan, m));
  for (const CopyTask& t : tasks) {
    if (t.rows <= 0 || !IsScratch(plan, t.src_buffer)) continue;
    auto it = writers_.find(t.src_buffer);
    if (it == writers_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer rank ", rank_, ": buffer ", plan.src.buffers[t.src_buffer].name,
          " holds converted values no conversion of the rank writes"));
    }
    mw.converted = true;
    const int64_t lo = t.src_offset;
    const int64_t hi = t.src_offset + (t.rows - 1) * t.src_row_stride + t.row_bytes;
    for (int32_t k : it->second) {
      const auto [begin, end] = conversions_->rows_at(k, t.src_buffer, lo, hi);
      // Codes only where it reads them (or the kind writes them anyway).
      const bool codes = t.src_buffer == conversions_->conversion(k).to_buffer ||
                         !conversions_->scales_alone(k);
      auto rows = std::find_if(mw.convs.begin(), mw.convs.end(),
                               [k](const ConversionStage::Rows& x) { return x.conversion == k; });
      if (rows == mw.convs.end()) {
        mw.convs.push_back({k, begin, end, codes});
      } else {
        rows->begin = std::min(rows->begin, begin);
        rows->end = std::max(rows->end, end);
        rows->codes = rows->codes || codes;
      }
    }
  }
  if (!mw.converted) return absl::OkStatus();
  // What the rows write, per scratch buffer, laid out one after another.
  for (const ConversionStage::Rows& r : mw.convs) {
    const Conversion& c = conversions_->conversion(r.conversion);
    for (int32_t b : {r.codes ? c.to_buffer : -1, c.scale_buffer, c.global_buffer}) {
      if (b < 0) continue;
      const auto [lo, hi] = conversions_->row_bytes(r.conversion, b, r.begin, r.end);
      auto s = std::find_if(mw.slices.begin(), mw.slices.end(),
                            [b](const MsgWork::Slice& x) { return x.buffer == b; });
      if (s == mw.slices.end()) {
        mw.slices.push_back({b, lo, hi, 0});
      } else {
        s->lo = std::min(s->lo, lo);
        s->hi = std::max(s->hi, hi);
      }
    }
  }
  // The source rows gathered (where strided) after them, one conversion
  // at a time.
  int64_t at = 0;
  for (MsgWork::Slice& s : mw.slices) {
    s.at = at;
    at = AlignTo(at + s.hi - s.lo, 256);
  }
  mw.gather_at = at;
  int64_t gather = 0;
  for (const ConversionStage::Rows& r : mw.convs) {
    gather = std::max(gather, conversions_->gather_bytes(r));
  }
  mw.convert_bytes = at + gather;
  mw.direct = nullptr;
  mw.tasks = std::move(tasks);
  return absl::OkStatus();
}

absl::Status DeltaRunner::StageConverted(BatchWork& w) {
  if (w.convert_bytes == 0) return absl::OkStatus();
  const absl::Time t0 = absl::Now();
  char* area = lane_room_[w.lane] + w.convert_offset;
  absl::Status s;
  for (const MsgWork& m : w.msgs) {
    if (!m.converted) continue;
    // The slices' bytes lie at their offsets in their buffers from these
    // addresses; nothing outside [lo, hi) is read or written.
    for (const MsgWork::Slice& x : m.slices) convert_buffers_[x.buffer] = area + x.at - x.lo;
    s = conversions_->Convert(*lane_convert_[w.lane], convert_buffers_, m.convs,
                              area + m.gather_at);
    absl::StatusOr<std::vector<ResolvedCopy>> copies =
        s.ok() ? ResolveTasks(m.tasks, convert_buffers_, {}, nullptr, w.staging + m.stage_offset)
               : s;
    s = copies.ok() ? copier_->Copy(w.lane, *copies) : copies.status();
    for (const MsgWork::Slice& x : m.slices) convert_buffers_[x.buffer] = buffers_[x.buffer];
    if (!s.ok()) break;
  }
  delta_stats_.convert_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  return s;
}

absl::Status DeltaRunner::ExchangeAmaxes(absl::Time deadline) {
  exchange_used_ = exchange_beside_ = 0;
  // The amax exchange's few floats lie in a lane room (nothing is in
  // flight before the first batch); the copier's memory only if none has
  // room.
  char* room = nullptr;
  int64_t room_bytes = 0;
  for (size_t lane = 0; lane < lane_room_.size() && room == nullptr; ++lane) {
    room = lane_room_[lane];
    room_bytes = lane_room_bytes_[lane];
  }
  exchange_memory_.allocate = [this, room, room_bytes](int64_t bytes) -> absl::StatusOr<char*> {
    const int64_t at = AlignTo(exchange_used_, 16);
    if (room != nullptr && at + bytes <= room_bytes) {
      exchange_used_ = at + bytes;
      return room + at;
    }
    REFIT_ASSIGN_OR_RETURN(char* p, copier_->Allocate(bytes));
    exchange_beside_ += bytes;
    return p;
  };
  exchange_memory_.release = [this, room, room_bytes](char* p, int64_t) {
    if (room != nullptr && p >= room && p < room + room_bytes) return;
    copier_->Free(p);
  };
  // The rooms of the rank's lanes are free, and nothing is in flight: the
  // exchange takes lane 0 alone.
  return conversions_->ExchangeAmaxes(
      buffers_, AmaxExchangeOver(conversions_.get(), transport_, copier_, &exchange_memory_,
                                 rank_, deadline));
}

absl::Status DeltaRunner::SyncConversions(int32_t lane) {
  for (size_t k = 0; k < lane_convert_.size(); ++k) {
    if (lane >= 0 && static_cast<int32_t>(k) != lane) continue;
    REFIT_RETURN_IF_ERROR(lane_convert_[k]->Sync());
  }
  return absl::OkStatus();
}

int64_t DeltaRunner::ConversionWorkspace() const {
  if (conversions_ == nullptr) return 0;
  int64_t n = conversions_->workspace_bytes();
  for (const auto& ops : lane_convert_) n += ops->workspace_bytes();
  return n;
}

}  // namespace refit
