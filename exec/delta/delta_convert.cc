// DeltaRunner's quantized engines (see delta_runner.h, Quantized engines):
// a trainer rank's conversions, their amaxes exchanged once a round, each
// batch's records quantized into the front of its lane room on its lane.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/convert/amax_exchange.h"
#include "exec/delta/delta_runner.h"
#include "exec/program/message_place.h"

namespace refit {
namespace {

int64_t AlignTo(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

bool IsScratch(const Plan& plan, int32_t b) {
  return b >= 0 && static_cast<size_t>(b) < plan.src.buffers.size() &&
         plan.src.buffers[b].scratch;
}

}  // namespace

absl::Status DeltaRunner::NoteConversions(const Plan& plan, const Message& m, MsgWork& mw,
                                          BatchWork& w) {
  // The byte ranges m reads: PlaceMessage's rule (one range of src_buffer
  // when contiguous, else its pack program's rows).
  struct Read {
    int32_t buffer;
    int64_t lo, hi;
  };
  std::vector<Read> reads;
  std::vector<CopyTask> tasks;
  const bool contiguous = m.src_contiguous && m.src_buffer >= 0 &&
                          static_cast<size_t>(m.src_buffer) < buffers_.size();
  if (contiguous) {
    reads.push_back({m.src_buffer, m.src_offset, m.src_offset + m.bytes});
  } else {
    REFIT_ASSIGN_OR_RETURN(tasks, PackProgram(plan, m));
    for (const CopyTask& t : tasks) {
      if (t.rows <= 0) continue;
      reads.push_back(
          {t.src_buffer, t.src_offset, t.src_offset + (t.rows - 1) * t.src_row_stride + t.row_bytes});
    }
  }
  for (const Read& r : reads) {
    if (!IsScratch(plan, r.buffer)) continue;
    auto it = writers_.find(r.buffer);
    if (it == writers_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer rank ", rank_, ": buffer ", plan.src.buffers[r.buffer].name,
          " holds converted values no conversion of the rank writes"));
    }
    mw.converted = true;
    for (int32_t k : it->second) {
      const auto [begin, end] = conversions_->rows_at(k, r.buffer, r.lo, r.hi);
      auto rows = std::find_if(w.convs.begin(), w.convs.end(),
                               [k](const ConversionStage::Rows& x) { return x.conversion == k; });
      if (rows == w.convs.end()) {
        w.convs.push_back({k, begin, end});
      } else {
        rows->begin = std::min(rows->begin, begin);
        rows->end = std::max(rows->end, end);
      }
    }
  }
  if (!mw.converted) return absl::OkStatus();
  mw.direct_later = contiguous;
  mw.tasks = std::move(tasks);
  return absl::OkStatus();
}

void DeltaRunner::LayOutConversions(const Plan& plan) {
  for (BatchWork& w : work_) {
    w.slices.clear();
    for (const ConversionStage::Rows& r : w.convs) {
      const Conversion& c = conversions_->conversion(r.conversion);
      for (int32_t b : {c.to_buffer, c.scale_buffer, c.global_buffer}) {
        if (b < 0) continue;
        const auto [lo, hi] = conversions_->row_bytes(r.conversion, b, r.begin, r.end);
        auto s = std::find_if(w.slices.begin(), w.slices.end(),
                              [b](const BatchWork::Slice& x) { return x.buffer == b; });
        if (s == w.slices.end()) {
          w.slices.push_back({b, lo, hi, 0});
        } else {
          s->lo = std::min(s->lo, lo);
          s->hi = std::max(s->hi, hi);
        }
      }
    }
    int64_t at = 0;
    for (BatchWork::Slice& s : w.slices) {
      s.at = at;
      at = AlignTo(at + s.hi - s.lo, 256);
    }
    w.convert_bytes = at;
  }
}

absl::Status DeltaRunner::PlaceConverted(const Plan& plan) {
  for (BatchWork& w : work_) {
    if (w.convs.empty()) continue;
    // Each slice's bytes lie at their offsets in their buffer from this
    // address; nothing outside [lo, hi) is read or written.
    w.buffers = buffers_;
    for (const BatchWork::Slice& s : w.slices) w.buffers[s.buffer] = w.staging + s.at - s.lo;
    for (MsgWork& mw : w.msgs) {
      if (!mw.converted) continue;
      REFIT_ASSIGN_OR_RETURN(
          MessagePlace place,
          PlaceMessage(plan, plan.messages[mw.message], true, plan.src, w.buffers,
                       absl::StrCat("trainer rank ", rank_)));
      if ((place.direct != nullptr) != mw.direct_later) {
        return absl::InternalError(absl::StrCat("trainer rank ", rank_, ": message ",
                                                mw.message, " placed unlike its staging"));
      }
      mw.direct = place.direct;
      mw.tasks = std::move(place.tasks);
    }
  }
  return absl::OkStatus();
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

absl::Status DeltaRunner::Convert(BatchWork& w) {
  if (w.convs.empty()) return absl::OkStatus();
  const absl::Time t0 = absl::Now();
  REFIT_RETURN_IF_ERROR(conversions_->Convert(*lane_convert_[w.lane], w.buffers, w.convs));
  delta_stats_.convert_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  return absl::OkStatus();
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
  int64_t n = conversions_->workspace_bytes() + exchange_beside_;
  for (const auto& ops : lane_convert_) n += ops->workspace_bytes();
  return n;
}

}  // namespace refit
