// DeltaRunner's quantized engines (see delta_runner.h, Quantized engines):
// a trainer rank's conversions, their amaxes exchanged once a round, each
// batch's records quantized into the front of its lane room on its lane.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/round_up.h"
#include "common/status_macros.h"
#include "exec/convert/amax_exchange.h"
#include "exec/delta/delta_runner.h"

namespace refit {
namespace {

bool IsScratch(const Plan& plan, int32_t b) {
  return b >= 0 && static_cast<size_t>(b) < plan.src.buffers.size() &&
         plan.src.buffers[b].scratch;
}

// Rows `r` in steps of `step` rows (a multiple of the tile rows), cut on
// its multiples (0: one step).
void AppendSteps(const ConversionStage::Rows& r, int64_t step,
                 std::vector<ConversionStage::Rows>* steps) {
  if (r.end <= r.begin || step <= 0) {
    steps->push_back(r);
    return;
  }
  for (int64_t b = r.begin; b < r.end;) {
    const int64_t e = std::min(r.end, (b / step + 1) * step);
    steps->push_back({r.conversion, b, e, r.codes});
    b = e;
  }
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
  mw.direct = nullptr;
  mw.tasks = std::move(tasks);
  return absl::OkStatus();
}

int64_t DeltaRunner::StepConversions(MsgWork& m, int64_t room) const {
  std::vector<MsgWork::Slice> slices;
  m.steps.clear();
  m.convert_bytes = 0;
  for (const ConversionStage::Rows& r : m.convs) {
    const Box& box = conversions_->conversion(r.conversion).from.box;
    const int64_t align = conversions_->row_align(r.conversion);
    const size_t first = m.steps.size();
    // All rows in one step (cut on its multiples), then fewer tile rows a
    // step until the largest step's area (its slices and gather) fits
    // `room`, or its rows are one tile row's.
    int64_t step = box.rank() == 0 || box.shape(0) == 0
                       ? 0
                       : RoundUp(std::max<int64_t>(1, r.end - r.begin), align);
    while (true) {
      AppendSteps(r, step, &m.steps);
      int64_t bytes = 0, rows = 0;
      for (size_t i = first; i < m.steps.size(); ++i) {
        const ConversionStage::Rows& x = m.steps[i];
        bytes = std::max(bytes, LayOutStep(x, &slices) + conversions_->gather_bytes(x));
        rows = std::max(rows, x.end - x.begin);
      }
      if (bytes <= room || step <= 0 || rows <= align) {
        m.convert_bytes = std::max(m.convert_bytes, bytes);
        break;
      }
      m.steps.resize(first);
      const int64_t fit = static_cast<int64_t>(static_cast<__int128>(rows) * room / bytes);
      step = std::max(align, std::min(rows - 1, fit) / align * align);
    }
  }
  return m.convert_bytes;
}

int64_t DeltaRunner::LayOutStep(const ConversionStage::Rows& r,
                                std::vector<MsgWork::Slice>* slices) const {
  slices->clear();
  const Conversion& c = conversions_->conversion(r.conversion);
  int64_t at = 0;
  for (int32_t b : {r.codes ? c.to_buffer : -1, c.scale_buffer, c.global_buffer}) {
    if (b < 0) continue;
    const auto [lo, hi] = conversions_->row_bytes(r.conversion, b, r.begin, r.end);
    slices->push_back({b, lo, hi, at});
    at = RoundUp(at + hi - lo, 256);
  }
  return at;
}

namespace {

// The part of task `t` whose source bytes lie in [lo, hi) of its source
// buffer, as tasks (rows never overlap: a stride at least the row, or 0
// for a row read again).
void AppendClipped(const CopyTask& t, int64_t lo, int64_t hi, std::vector<CopyTask>* out) {
  auto piece = [&](int64_t row, int64_t rows, int64_t from, int64_t to) {
    CopyTask p = t;
    p.rows = rows;
    p.src_offset = t.src_offset + row * t.src_row_stride + from;
    p.dst_offset = t.dst_offset + row * t.dst_row_stride + from;
    p.row_bytes = to - from;
    out->push_back(p);
  };
  if (t.rows <= 0 || t.row_bytes <= 0) return;
  if (t.src_row_stride == 0 || t.rows == 1) {  // every row the same source bytes
    const int64_t from = std::max<int64_t>(0, lo - t.src_offset);
    const int64_t to = std::min<int64_t>(t.row_bytes, hi - t.src_offset);
    if (from < to) piece(0, t.rows, from, to);
    return;
  }
  const int64_t stride = t.src_row_stride;
  // Rows starting at or after lo and ending at or before hi: [first, last).
  const int64_t first = std::max<int64_t>(0, (lo - t.src_offset + stride - 1) / stride);
  const int64_t last =
      std::min<int64_t>(t.rows, hi - t.src_offset - t.row_bytes < 0
                                    ? 0
                                    : (hi - t.src_offset - t.row_bytes) / stride + 1);
  if (first < last) piece(first, last - first, 0, t.row_bytes);
  // The rows cut by lo or hi.
  for (int64_t row : {first - 1, std::max(first, last)}) {
    if (row < 0 || row >= t.rows || (row >= first && row < last)) continue;
    const int64_t start = t.src_offset + row * stride;
    const int64_t from = std::max<int64_t>(0, lo - start);
    const int64_t to = std::min<int64_t>(t.row_bytes, hi - start);
    if (from < to) piece(row, 1, from, to);
  }
}

}  // namespace

absl::Status DeltaRunner::StageConverted(BatchWork& w) {
  if (w.convert_bytes == 0) return absl::OkStatus();
  const absl::Time t0 = absl::Now();
  char* area = lane_room_[w.lane] + w.convert_offset;
  char* const* own = buffers_.data();
  absl::Status s;
  std::vector<MsgWork::Slice> slices;
  std::vector<CopyTask> part;
  for (const MsgWork& m : w.msgs) {
    if (!m.converted) continue;
    char* place = w.staging + m.stage_offset;
    // What it reads of the registered buffers, at once.
    part.clear();
    for (const CopyTask& t : m.tasks) {
      if (!IsScratch(*plan_, t.src_buffer)) part.push_back(t);
    }
    absl::StatusOr<std::vector<ResolvedCopy>> copies =
        ResolveTasks(part, buffers_, {}, nullptr, place);
    s = copies.ok() ? copier_->Copy(w.lane, *copies) : copies.status();
    // Then step by step: the step's rows quantized into the area (their
    // bytes at their offsets in their buffers from these addresses;
    // nothing outside [lo, hi) is read or written), and what the message
    // reads of them packed from there.
    for (const ConversionStage::Rows& r : m.steps) {
      if (!s.ok()) break;
      const int64_t gather_at = LayOutStep(r, &slices);
      part.clear();
      for (const MsgWork::Slice& x : slices) {
        convert_buffers_[x.buffer] = area + x.at - x.lo;
        for (const CopyTask& t : m.tasks) {
          if (t.src_buffer == x.buffer) AppendClipped(t, x.lo, x.hi, &part);
        }
      }
      s = conversions_->Convert(*lane_convert_[w.lane], convert_buffers_, {r}, area + gather_at);
      if (s.ok()) {
        copies = ResolveTasks(part, convert_buffers_, {}, nullptr, place);
        s = copies.ok() ? copier_->Copy(w.lane, *copies) : copies.status();
      }
      for (const MsgWork::Slice& x : slices) convert_buffers_[x.buffer] = own[x.buffer];
    }
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
    const int64_t at = RoundUp(exchange_used_, 16);
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
  // exchange takes lane 0 alone, and the amax pass gathers the records not
  // lying dense in the largest room, in bands of rows, before it.
  size_t largest = 0;
  for (size_t lane = 0; lane < lane_room_.size(); ++lane) {
    if (lane_room_bytes_[lane] > lane_room_bytes_[largest]) largest = lane;
  }
  char* gather = largest < lane_room_.size() ? lane_room_[largest] : nullptr;
  return conversions_->ExchangeAmaxes(
      buffers_,
      AmaxExchangeOver(conversions_.get(), transport_, copier_, &exchange_memory_, rank_,
                       deadline),
      gather, gather == nullptr ? 0 : lane_room_bytes_[largest]);
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
