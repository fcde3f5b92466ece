// DeltaCodec: one message's bytes written as what changed since a snapshot.
//
// A delta round sends, per plan message, only the words whose bytes differ
// from the snapshot of that message (the bytes the receiving engine holds
// from its committed version), with their exact new values: never additive
// deltas, so applying a message twice, or to bytes already new, is
// harmless. A word is the message's element granule (the gcd of the element
// sizes in it: 2 for BF16, 1 for FP8 codes with f32 scales).
//
// Encodings, chosen per message by size (ChooseEncoding), for n words of
// w bytes of which c changed:
//   kIndices  u32 word indices, increasing, then the changed words' values:
//             c * (4 + w) bytes.
//   kBitmask  one bit per word (LSB first), then the changed words' values:
//             n / 8 + c * w bytes.
//   kDense    the message's bytes as they are: n * w.
// Indices are the smaller below c/n = 1/32 (3.1%), the bitmask from there
// until dense wins at 1 - 1/(8w) (93.75% for BF16). Adjacent RL steps
// change 1-4% of BF16 words and 0.2-0.4% of FP8 codes: at 2% of BF16 words
// indices take 6.0% of the dense bytes and a bitmask 8.3%; at 0.3% of FP8
// codes indices take 1.5% and a bitmask 12.8%. At 20% of BF16 words,
// indices would take 60% and a bitmask 26%; at FP8's densities a bitmask
// takes 8x the bytes of indices: hence both.
//
// Every encoded message starts with a DeltaHeader, so a receiver can size
// its receive from the header alone and checks the rest before it writes.
#ifndef REFIT_EXEC_DELTA_DELTA_CODEC_H_
#define REFIT_EXEC_DELTA_DELTA_CODEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace refit {

enum class DeltaEncoding : uint8_t { kDense = 0, kIndices = 1, kBitmask = 2 };

// Returns "dense", "indices" or "bitmask".
const char* DeltaEncodingName(DeltaEncoding e);

// At the start of every encoded message; little-endian, 32 bytes.
struct DeltaHeader {
  static constexpr uint32_t kMagic = 0x31444652;  // "RFD1"
  uint32_t magic = kMagic;
  uint8_t encoding = 0;    // a DeltaEncoding
  uint8_t word_bytes = 0;  // 1, 2, 4 or 8
  uint16_t reserved = 0;
  uint64_t num_words = 0;      // the message's bytes / word_bytes
  uint64_t num_changed = 0;    // words sent (kDense: num_words)
  uint64_t payload_bytes = 0;  // bytes after the header
};
static_assert(sizeof(DeltaHeader) == 32, "DeltaHeader is 32 bytes on the wire");

// Returns the payload bytes (after the header) of a message of `num_words`
// words of `word_bytes`, `num_changed` of them changed, in encoding `e`;
// -1 when `e` cannot hold it (kIndices past 2^32 words).
int64_t DeltaPayloadBytes(DeltaEncoding e, int word_bytes, int64_t num_words,
                          int64_t num_changed);

// Returns the encoding with the fewest payload bytes (kDense on a tie).
DeltaEncoding ChooseEncoding(int word_bytes, int64_t num_words, int64_t num_changed);

// Returns how many words of `current` differ from `snapshot` (same length,
// a multiple of word_bytes; not checked).
int64_t CountChangedWords(absl::Span<const uint8_t> current,
                          absl::Span<const uint8_t> snapshot, int word_bytes);

// Writes the header and payload of `current` against `snapshot` in encoding
// `e` into `out` and returns the bytes written (32 + payload). `num_changed`
// is CountChangedWords's answer. INVALID_ARGUMENT when word_bytes is not 1,
// 2, 4 or 8, the spans' lengths differ or are not whole words, `e` cannot
// hold the message, or `out` is smaller than needed.
absl::StatusOr<int64_t> EncodeDelta(absl::Span<const uint8_t> current,
                                    absl::Span<const uint8_t> snapshot, int word_bytes,
                                    DeltaEncoding e, int64_t num_changed,
                                    absl::Span<uint8_t> out);

// EncodeDelta without the header: writes only the payload into `out` (at
// least the payload's bytes) and returns the header that describes it.
absl::StatusOr<DeltaHeader> EncodeDeltaPayload(absl::Span<const uint8_t> current,
                                               absl::Span<const uint8_t> snapshot,
                                               int word_bytes, DeltaEncoding e,
                                               int64_t num_changed, absl::Span<uint8_t> out);

// Reads and checks the header at the start of `encoded` (at least 32
// bytes): DATA_LOSS naming the field when the magic, encoding, word size or
// the payload size that its counts imply is wrong.
absl::StatusOr<DeltaHeader> ReadDeltaHeader(absl::Span<const uint8_t> encoded);

// Applies an encoded message to `target`, the receiver's bytes of that
// message as of the snapshot: afterwards `target` holds the sender's
// current bytes. Everything read from the peer is checked before a byte is
// written, so a malformed message leaves `target` as it was: DATA_LOSS
// naming what is wrong (header, target size, an index out of range or not
// increasing, a bitmask whose bits disagree with the count).
absl::Status ApplyDelta(absl::Span<const uint8_t> encoded, absl::Span<uint8_t> target);

// ApplyDelta for a header that ReadDeltaHeader accepted and its payload
// (at least header.payload_bytes), received apart from it.
absl::Status ApplyDeltaPayload(const DeltaHeader& header, absl::Span<const uint8_t> payload,
                               absl::Span<uint8_t> target);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DELTA_CODEC_H_
