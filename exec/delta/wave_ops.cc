// The host DeltaWaveOps (see wave_ops.h): every step on the calling thread.
#include "exec/delta/wave_ops.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/delta/region_digest.h"

namespace refit {
namespace {

absl::Span<const uint8_t> Bytes(const char* p, int64_t n) {
  return {reinterpret_cast<const uint8_t*>(p), static_cast<size_t>(n)};
}

absl::Status CheckWords(const EncodeItem& it) {
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

class HostWaveOps : public DeltaWaveOps {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }
  bool OrderedWithTransport() const override { return false; }
  absl::StatusOr<char*> Allocate(int64_t bytes) override {
    void* p = std::malloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("delta: cannot allocate ", bytes, " bytes"));
    }
    return static_cast<char*>(p);
  }
  void Free(char* p) override { std::free(p); }
  absl::StatusOr<char*> AllocateSnapshot(int64_t bytes) override { return Allocate(bytes); }
  std::function<void(char*)> SnapshotReleaser() const override {
    return [](char* p) { std::free(p); };
  }
  absl::Status AfterLane(int32_t) override { return absl::OkStatus(); }
  absl::Status Sync(int32_t, absl::Time) override { return absl::OkStatus(); }
  absl::Status Copy(int32_t, char* dst, const char* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status HeadersToHost(int32_t, const char* src, DeltaHeader* dst, int64_t n,
                             absl::Time) override {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(DeltaHeader));
    return absl::OkStatus();
  }
  absl::Status StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                          absl::Time deadline) override {
    std::vector<int64_t> counts;
    counts.reserve(items.size());
    for (const EncodeItem& it : items) {
      REFIT_RETURN_IF_ERROR(CheckWords(it));
      for (const DigestItem& d : it.digest) {
        if (d.data < it.cur || d.bytes < 0 || d.data + d.bytes > it.cur + it.bytes) {
          return absl::InvalidArgumentError("digest: a run outside its message's bytes");
        }
      }
      REFIT_RETURN_IF_ERROR(AddDigest(lane, it.digest, deadline));
      counts.push_back(it.snap == nullptr
                           ? it.bytes / it.word_bytes
                           : CountChangedWords(Bytes(it.cur, it.bytes), Bytes(it.snap, it.bytes),
                                               it.word_bytes));
    }
    counted_[lane].push_back(std::move(counts));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int64_t>> FinishCount(int32_t lane, absl::Time) override {
    auto it = counted_.find(lane);
    if (it == counted_.end() || it->second.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("delta: no count started on lane ", lane));
    }
    std::vector<int64_t> counts = std::move(it->second.front());
    it->second.pop_front();
    return counts;
  }
  absl::Status Encode(int32_t, absl::Span<const EncodeItem> items,
                      absl::Span<const DeltaHeader> headers, absl::Span<char* const> out,
                      char* header_out, absl::Time) override {
    for (size_t i = 0; i < items.size(); ++i) {
      const EncodeItem& it = items[i];
      const DeltaHeader& h = headers[i];
      std::memcpy(header_out + i * sizeof(DeltaHeader), &h, sizeof(DeltaHeader));
      const auto e = static_cast<DeltaEncoding>(h.encoding);
      if (e == DeltaEncoding::kDense) continue;
      if (it.snap == nullptr) {
        return absl::InvalidArgumentError("delta encode: a delta needs a snapshot");
      }
      absl::StatusOr<DeltaHeader> got = EncodeDeltaPayload(
          Bytes(it.cur, it.bytes), Bytes(it.snap, it.bytes), it.word_bytes, e,
          static_cast<int64_t>(h.num_changed),
          {reinterpret_cast<uint8_t*>(out[i]), static_cast<size_t>(h.payload_bytes)});
      if (!got.ok()) return got.status();
    }
    return absl::OkStatus();
  }
  absl::Status Apply(int32_t, absl::Span<const ApplyItem> items,
                     std::vector<std::string> names, absl::Time) override {
    // ApplyDeltaPayload checks an item whole before writing it.
    for (size_t i = 0; i < items.size(); ++i) {
      const ApplyItem& it = items[i];
      const int64_t bytes = static_cast<int64_t>(it.header.num_words) * it.header.word_bytes;
      absl::Status s = ApplyDeltaPayload(
          it.header, Bytes(it.payload, static_cast<int64_t>(it.header.payload_bytes)),
          {reinterpret_cast<uint8_t*>(it.target), static_cast<size_t>(bytes)});
      if (!s.ok()) return AnnotateStatus(s, i < names.size() ? names[i] : "");
    }
    return absl::OkStatus();
  }
  absl::Status Finish(absl::Time) override { return absl::OkStatus(); }

  absl::Status StartDigests(int32_t slots) override {
    if (slots < 0) return absl::InvalidArgumentError(absl::StrCat("digest: ", slots, " slots"));
    sums_.assign(static_cast<size_t>(slots), 0);
    return absl::OkStatus();
  }
  absl::Status AddDigest(int32_t, absl::Span<const DigestItem> items, absl::Time) override {
    const auto slots = static_cast<int32_t>(sums_.size());
    for (const DigestItem& it : items) {
      if (it.slot < 0 || it.slot >= slots) {
        return absl::InvalidArgumentError(absl::StrCat("digest: slot ", it.slot, " of ", slots));
      }
      REFIT_ASSIGN_OR_RETURN(uint64_t x,
                             DigestRun(it.data, it.bytes, it.element_bytes, it.first_key));
      sums_[it.slot] += x;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<uint64_t>> TakeDigests(absl::Time) override { return sums_; }

 private:
  std::map<int32_t, std::deque<std::vector<int64_t>>> counted_;  // by lane, oldest first
  std::vector<uint64_t> sums_;  // the running digest sums (StartDigests)
};

}  // namespace

std::unique_ptr<DeltaWaveOps> MakeHostWaveOps() { return std::make_unique<HostWaveOps>(); }

}  // namespace refit
