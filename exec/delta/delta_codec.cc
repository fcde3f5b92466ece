// DeltaCodec (see delta_codec.h).
#include "exec/delta/delta_codec.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

constexpr int64_t kHeaderBytes = sizeof(DeltaHeader);
constexpr int64_t kMaxIndexedWords = int64_t{1} << 32;

bool ValidWordBytes(int w) { return w == 1 || w == 2 || w == 4 || w == 8; }

bool WordDiffers(const uint8_t* a, const uint8_t* b, int w) {
  return std::memcmp(a, b, w) != 0;
}

absl::Status DataLoss(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("delta message: ", what));
}

}  // namespace

const char* DeltaEncodingName(DeltaEncoding e) {
  switch (e) {
    case DeltaEncoding::kDense: return "dense";
    case DeltaEncoding::kIndices: return "indices";
    case DeltaEncoding::kBitmask: return "bitmask";
  }
  return "unknown";
}

int64_t DeltaPayloadBytes(DeltaEncoding e, int word_bytes, int64_t num_words,
                          int64_t num_changed) {
  switch (e) {
    case DeltaEncoding::kDense:
      return num_words * word_bytes;
    case DeltaEncoding::kIndices:
      if (num_words > kMaxIndexedWords) return -1;
      return num_changed * (4 + word_bytes);
    case DeltaEncoding::kBitmask:
      return (num_words + 7) / 8 + num_changed * word_bytes;
  }
  return -1;
}

DeltaEncoding ChooseEncoding(int word_bytes, int64_t num_words, int64_t num_changed) {
  DeltaEncoding best = DeltaEncoding::kDense;
  int64_t best_bytes = DeltaPayloadBytes(best, word_bytes, num_words, num_changed);
  for (DeltaEncoding e : {DeltaEncoding::kIndices, DeltaEncoding::kBitmask}) {
    const int64_t b = DeltaPayloadBytes(e, word_bytes, num_words, num_changed);
    if (b >= 0 && b < best_bytes) {
      best = e;
      best_bytes = b;
    }
  }
  return best;
}

int64_t CountChangedWords(absl::Span<const uint8_t> current,
                          absl::Span<const uint8_t> snapshot, int word_bytes) {
  const int64_t n = static_cast<int64_t>(current.size()) / word_bytes;
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    changed += WordDiffers(current.data() + i * word_bytes,
                           snapshot.data() + i * word_bytes, word_bytes);
  }
  return changed;
}

absl::StatusOr<DeltaHeader> EncodeDeltaPayload(absl::Span<const uint8_t> current,
                                               absl::Span<const uint8_t> snapshot,
                                               int word_bytes, DeltaEncoding e,
                                               int64_t num_changed, absl::Span<uint8_t> out) {
  if (!ValidWordBytes(word_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("delta encode: word size ", word_bytes, " is not 1, 2, 4 or 8"));
  }
  if (current.size() != snapshot.size() || current.size() % word_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta encode: current (", current.size(), " bytes) and snapshot (",
        snapshot.size(), " bytes) must be the same whole number of ", word_bytes,
        "-byte words"));
  }
  const int64_t n = static_cast<int64_t>(current.size()) / word_bytes;
  if (e == DeltaEncoding::kDense) num_changed = n;
  const int64_t payload = DeltaPayloadBytes(e, word_bytes, n, num_changed);
  if (payload < 0 || num_changed < 0 || num_changed > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta encode: ", DeltaEncodingName(e), " cannot hold ", num_changed,
        " changes of ", n, " words"));
  }
  if (static_cast<int64_t>(out.size()) < payload) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta encode: output of ", out.size(), " bytes, ", payload,
        " needed"));
  }
  DeltaHeader h;
  h.encoding = static_cast<uint8_t>(e);
  h.word_bytes = static_cast<uint8_t>(word_bytes);
  h.num_words = static_cast<uint64_t>(n);
  h.num_changed = static_cast<uint64_t>(num_changed);
  h.payload_bytes = static_cast<uint64_t>(payload);
  uint8_t* p = out.data();
  const uint8_t* cur = current.data();
  const uint8_t* snap = snapshot.data();
  if (e == DeltaEncoding::kDense) {
    std::memcpy(p, cur, current.size());
    return h;
  }
  int64_t written = 0;
  bool more = false;  // a changed word past num_changed
  if (e == DeltaEncoding::kIndices) {
    uint8_t* values = p + num_changed * 4;
    for (int64_t i = 0; i < n; ++i) {
      if (!WordDiffers(cur + i * word_bytes, snap + i * word_bytes, word_bytes)) continue;
      if (written == num_changed) {
        more = true;
        break;
      }
      const uint32_t idx = static_cast<uint32_t>(i);
      std::memcpy(p + written * 4, &idx, 4);
      std::memcpy(values + written * word_bytes, cur + i * word_bytes, word_bytes);
      ++written;
    }
  } else {
    const int64_t mask_bytes = (n + 7) / 8;
    std::memset(p, 0, mask_bytes);
    uint8_t* values = p + mask_bytes;
    for (int64_t i = 0; i < n; ++i) {
      if (!WordDiffers(cur + i * word_bytes, snap + i * word_bytes, word_bytes)) continue;
      if (written == num_changed) {
        more = true;
        break;
      }
      p[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      std::memcpy(values + written * word_bytes, cur + i * word_bytes, word_bytes);
      ++written;
    }
  }
  if (more || written != num_changed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta encode: told ", num_changed, " words changed, found ",
        more ? "more" : absl::StrCat(written)));
  }
  return h;
}

absl::StatusOr<int64_t> EncodeDelta(absl::Span<const uint8_t> current,
                                    absl::Span<const uint8_t> snapshot, int word_bytes,
                                    DeltaEncoding e, int64_t num_changed,
                                    absl::Span<uint8_t> out) {
  if (static_cast<int64_t>(out.size()) < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("delta encode: output of ", out.size(), " bytes, shorter than a header"));
  }
  auto h = EncodeDeltaPayload(current, snapshot, word_bytes, e, num_changed,
                              out.subspan(kHeaderBytes));
  if (!h.ok()) return h.status();
  std::memcpy(out.data(), &*h, kHeaderBytes);
  return kHeaderBytes + static_cast<int64_t>(h->payload_bytes);
}

absl::StatusOr<DeltaHeader> ReadDeltaHeader(absl::Span<const uint8_t> encoded) {
  if (static_cast<int64_t>(encoded.size()) < kHeaderBytes) {
    return DataLoss(absl::StrCat(encoded.size(), " bytes, shorter than its header"));
  }
  DeltaHeader h;
  std::memcpy(&h, encoded.data(), kHeaderBytes);
  if (h.magic != DeltaHeader::kMagic) return DataLoss("wrong magic number");
  if (h.encoding > static_cast<uint8_t>(DeltaEncoding::kBitmask)) {
    return DataLoss(absl::StrCat("unknown encoding ", h.encoding));
  }
  if (!ValidWordBytes(h.word_bytes)) {
    return DataLoss(absl::StrCat("word size ", h.word_bytes, " is not 1, 2, 4 or 8"));
  }
  const uint64_t limit = std::numeric_limits<int64_t>::max() / 16;
  if (h.num_words > limit || h.num_changed > h.num_words) {
    return DataLoss(absl::StrCat("counts ", h.num_changed, " of ", h.num_words,
                                 " words are impossible"));
  }
  const auto e = static_cast<DeltaEncoding>(h.encoding);
  if (e == DeltaEncoding::kDense && h.num_changed != h.num_words) {
    return DataLoss("a dense message must send every word");
  }
  const int64_t want = DeltaPayloadBytes(e, h.word_bytes, static_cast<int64_t>(h.num_words),
                                         static_cast<int64_t>(h.num_changed));
  if (want < 0 || static_cast<uint64_t>(want) != h.payload_bytes) {
    return DataLoss(absl::StrCat("payload of ", h.payload_bytes, " bytes where ",
                                 DeltaEncodingName(e), " of these counts takes ", want));
  }
  return h;
}

absl::Status ApplyDelta(absl::Span<const uint8_t> encoded, absl::Span<uint8_t> target) {
  auto header = ReadDeltaHeader(encoded);
  if (!header.ok()) return header.status();
  const DeltaHeader& h = *header;
  if (static_cast<int64_t>(encoded.size()) < kHeaderBytes + static_cast<int64_t>(h.payload_bytes)) {
    return DataLoss(absl::StrCat(encoded.size(), " bytes, its header says ",
                                 kHeaderBytes + h.payload_bytes));
  }
  return ApplyDeltaPayload(h, encoded.subspan(kHeaderBytes), target);
}

absl::Status ApplyDeltaPayload(const DeltaHeader& h, absl::Span<const uint8_t> payload,
                               absl::Span<uint8_t> target) {
  const int w = h.word_bytes;
  const int64_t n = static_cast<int64_t>(h.num_words);
  const int64_t c = static_cast<int64_t>(h.num_changed);
  if (static_cast<int64_t>(target.size()) != n * w) {
    return DataLoss(absl::StrCat("for ", n * w, " bytes, applied to ", target.size()));
  }
  if (static_cast<int64_t>(payload.size()) < static_cast<int64_t>(h.payload_bytes)) {
    return DataLoss(absl::StrCat("payload of ", payload.size(), " bytes, its header says ",
                                 h.payload_bytes));
  }
  const uint8_t* p = payload.data();
  uint8_t* t = target.data();
  switch (static_cast<DeltaEncoding>(h.encoding)) {
    case DeltaEncoding::kDense:
      std::memcpy(t, p, target.size());
      return absl::OkStatus();
    case DeltaEncoding::kIndices: {
      // Check every index first: increasing and in range.
      int64_t prev = -1;
      for (int64_t k = 0; k < c; ++k) {
        uint32_t idx;
        std::memcpy(&idx, p + k * 4, 4);
        if (static_cast<int64_t>(idx) <= prev || static_cast<int64_t>(idx) >= n) {
          return DataLoss(absl::StrCat("index ", k, " (", idx, ") is ",
                                       idx >= n ? "past the message's end" : "not increasing"));
        }
        prev = idx;
      }
      const uint8_t* values = p + c * 4;
      for (int64_t k = 0; k < c; ++k) {
        uint32_t idx;
        std::memcpy(&idx, p + k * 4, 4);
        std::memcpy(t + static_cast<int64_t>(idx) * w, values + k * w, w);
      }
      return absl::OkStatus();
    }
    case DeltaEncoding::kBitmask: {
      const int64_t mask_bytes = (n + 7) / 8;
      int64_t set = 0;
      for (int64_t b = 0; b < mask_bytes; ++b) set += __builtin_popcount(p[b]);
      const int tail = static_cast<int>(n % 8);
      if (tail != 0 && (p[mask_bytes - 1] >> tail) != 0) {
        return DataLoss("bitmask has bits past the message's end");
      }
      if (set != c) {
        return DataLoss(absl::StrCat("bitmask marks ", set, " words, header says ", c));
      }
      const uint8_t* values = p + mask_bytes;
      int64_t k = 0;
      for (int64_t i = 0; i < n; ++i) {
        if ((p[i / 8] >> (i % 8)) & 1u) {
          std::memcpy(t + i * w, values + k * w, w);
          ++k;
        }
      }
      return absl::OkStatus();
    }
  }
  return DataLoss("unknown encoding");
}

}  // namespace refit
