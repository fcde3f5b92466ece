// StagedDeltaLog (see staged_delta.h).
#include "client/staged_delta.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {
namespace {

class LoggingOps : public ForwardingWaveOps {
 public:
  LoggingOps(std::unique_ptr<DeltaWaveOps> inner, StagedDeltaLog* log)
      : ForwardingWaveOps(std::move(inner)), log_(log) {}
  absl::Status Apply(int32_t lane, absl::Span<const ApplyItem> items,
                     std::vector<std::string> names, absl::Time deadline) override {
    log_->OnApply(items);
    return ForwardingWaveOps::Apply(lane, items, std::move(names), deadline);
  }

 private:
  StagedDeltaLog* log_;
};

class LoggingCopier : public Copier {
 public:
  LoggingCopier(std::unique_ptr<Copier> inner, StagedDeltaLog* log)
      : inner_(std::move(inner)), log_(log) {}
  MemoryKind kind() const override { return inner_->kind(); }
  absl::StatusOr<char*> Allocate(int64_t bytes) override { return inner_->Allocate(bytes); }
  void Free(char* p) override { inner_->Free(p); }
  absl::Status Copy(int32_t lane, absl::Span<const ResolvedCopy> copies) override {
    log_->OnCopy(copies);
    return inner_->Copy(lane, copies);
  }
  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    return inner_->Sync(lane, deadline);
  }
  absl::Status ToHost(void* dst, const char* src, int64_t bytes) override {
    return inner_->ToHost(dst, src, bytes);
  }
  bool OrderedWithTransport() const override { return inner_->OrderedWithTransport(); }
  absl::Status FromHost(char* dst, const void* src, int64_t bytes) override {
    return inner_->FromHost(dst, src, bytes);
  }
  std::unique_ptr<ConvertOps> MakeConvertOps(int32_t lane) override {
    return inner_->MakeConvertOps(lane);
  }

 private:
  std::unique_ptr<Copier> inner_;
  StagedDeltaLog* log_;
};

// Calls write(offset, value) for each changed word of an indices or
// bitmask payload, offsets increasing (the codec checked the payload when
// the runner applied it).
template <int W, typename F>
void ForEachChanged(const DeltaHeader& h, const uint8_t* p, F&& write) {
  const int64_t c = static_cast<int64_t>(h.num_changed);
  if (static_cast<DeltaEncoding>(h.encoding) == DeltaEncoding::kIndices) {
    const uint8_t* values = p + c * 4;
    for (int64_t k = 0; k < c; ++k) {
      uint32_t idx;
      std::memcpy(&idx, p + k * 4, 4);
      write(static_cast<int64_t>(idx) * W, values + k * W);
    }
    return;
  }
  const int64_t n = static_cast<int64_t>(h.num_words);
  const uint8_t* values = p + (n + 7) / 8;
  int64_t k = 0;
  for (int64_t b = 0; b < (n + 7) / 8; ++b) {
    for (uint32_t bits = p[b]; bits != 0; bits &= bits - 1) {
      write((b * 8 + __builtin_ctz(bits)) * W, values + (k++) * W);
    }
  }
}

// One unpacked row: bytes [offset, offset + bytes) of an applied message
// land at `live`.
struct Row {
  int64_t offset = 0;
  int64_t bytes = 0;
  char* live = nullptr;
};

template <int W>
absl::Status Scatter(const DeltaHeader& h, const uint8_t* payload, const std::vector<Row>& rows,
                     int64_t* words) {
  size_t r = 0;
  bool lost = false;
  ForEachChanged<W>(h, payload, [&](int64_t off, const uint8_t* v) {
    while (r < rows.size() && rows[r].offset + rows[r].bytes <= off) ++r;
    if (r == rows.size() || off < rows[r].offset || rows[r].live == nullptr) {
      lost = true;
      return;
    }
    std::memcpy(rows[r].live + (off - rows[r].offset), v, W);
    ++*words;
  });
  return lost ? absl::InternalError("a changed word maps to no staged buffer")
              : absl::OkStatus();
}

}  // namespace

std::unique_ptr<DeltaWaveOps> StagedDeltaLog::WrapOps(std::unique_ptr<DeltaWaveOps> inner) {
  return std::make_unique<LoggingOps>(std::move(inner), this);
}

std::unique_ptr<Copier> StagedDeltaLog::WrapCopier(std::unique_ptr<Copier> inner) {
  return std::make_unique<LoggingCopier>(std::move(inner), this);
}

void StagedDeltaLog::Clear() {
  entries_.clear();
  open_.clear();
}

void StagedDeltaLog::OnApply(absl::Span<const ApplyItem> items) {
  for (const ApplyItem& it : items) {
    Entry e;
    e.header = it.header;
    e.target = it.target;
    e.target_bytes = static_cast<int64_t>(it.header.num_words) * it.header.word_bytes;
    if (static_cast<DeltaEncoding>(it.header.encoding) != DeltaEncoding::kDense) {
      const auto* p = reinterpret_cast<const uint8_t*>(it.payload);
      e.payload.assign(p, p + it.header.payload_bytes);
    }
    // A later apply into the same range makes the earlier one's unpack done.
    auto first = open_.lower_bound(e.target);
    if (first != open_.begin()) {
      auto prev = std::prev(first);
      if (prev->first + entries_[prev->second].target_bytes > e.target) first = prev;
    }
    auto last = open_.lower_bound(e.target + e.target_bytes);
    open_.erase(first, last);
    open_[e.target] = entries_.size();
    entries_.push_back(std::move(e));
  }
}

void StagedDeltaLog::OnCopy(absl::Span<const ResolvedCopy> copies) {
  for (const ResolvedCopy& c : copies) {
    auto it = open_.upper_bound(c.src);
    if (it == open_.begin()) continue;  // not out of an applied message (a gather)
    --it;
    Entry& e = entries_[it->second];
    if (c.src < e.target + e.target_bytes) e.unpack.push_back(c);
  }
}

absl::StatusOr<int64_t> StagedDeltaLog::ApplyToLive(const std::vector<char*>& staging,
                                                    const std::vector<char*>& live,
                                                    const std::vector<int64_t>& bytes) const {
  std::map<const char*, size_t> by_start;  // staged buffers by address
  for (size_t i = 0; i < staging.size(); ++i) {
    if (staging[i] != nullptr) by_start[staging[i]] = i;
  }
  // The live address of staged bytes [p, p + n), or null.
  auto live_of = [&](const char* p, int64_t n) -> char* {
    auto it = by_start.upper_bound(p);
    if (it == by_start.begin()) return nullptr;
    --it;
    const size_t b = it->second;
    if (p + n > staging[b] + bytes[b]) return nullptr;
    return live[b] + (p - staging[b]);
  };
  int64_t words = 0;
  std::vector<Row> rows;
  for (size_t k = 0; k < entries_.size(); ++k) {
    const Entry& e = entries_[k];
    if (e.payload.empty() && e.header.num_changed > 0) {
      return absl::InternalError(absl::StrCat("staged delta message ", k, " came dense"));
    }
    if (e.header.num_changed == 0) continue;
    rows.clear();
    if (char* direct = live_of(e.target, e.target_bytes)) {
      rows.push_back({0, e.target_bytes, direct});
    } else {
      for (const ResolvedCopy& c : e.unpack) {
        for (int64_t r = 0; r < c.rows; ++r) {
          const char* src = c.src + r * c.src_row_stride;
          rows.push_back({src - e.target, c.row_bytes,
                          live_of(c.dst + r * c.dst_row_stride, c.row_bytes)});
        }
      }
      std::sort(rows.begin(), rows.end(),
                [](const Row& a, const Row& b) { return a.offset < b.offset; });
    }
    absl::Status s;
    switch (e.header.word_bytes) {
      case 1: s = Scatter<1>(e.header, e.payload.data(), rows, &words); break;
      case 2: s = Scatter<2>(e.header, e.payload.data(), rows, &words); break;
      case 4: s = Scatter<4>(e.header, e.payload.data(), rows, &words); break;
      case 8: s = Scatter<8>(e.header, e.payload.data(), rows, &words); break;
      default: s = absl::InternalError("word size not 1, 2, 4 or 8");
    }
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat("staged delta message ", k));
  }
  return words;
}

}  // namespace refit
