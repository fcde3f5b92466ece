// FNV-1a, 64 bit: refit's one non-cryptographic hash for names, fingerprints
// and digests that must be the same in every process and on every host
// (absl::Hash is seeded per process). Not for anything an adversary picks
// to collide.
#ifndef REFIT_COMMON_HASH_H_
#define REFIT_COMMON_HASH_H_

#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace refit {

// FNV-1a's 64-bit offset basis and prime (the published values).
inline constexpr uint64_t kFnv1aOffset = 14695981039346656037ULL;
inline constexpr uint64_t kFnv1aPrime = 1099511628211ULL;

// Returns FNV-1a of `bytes`, continuing from `h` (the offset basis: a hash
// of its own; a previous result: the hash of the concatenation).
inline uint64_t Fnv1a64(absl::string_view bytes, uint64_t h = kFnv1aOffset) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnv1aPrime;
  return h;
}

// Returns `h` mixed with a whole 64-bit word in one FNV-1a step (one xor,
// one multiply, where Fnv1a64 takes eight): for hashing many integers, as
// a box's coordinates, where speed matters more than FNV's distribution.
inline uint64_t Fnv1a64Word(uint64_t h, uint64_t word) {
  return (h ^ word) * kFnv1aPrime;
}

// Returns the hash of `bytes` a word a step: their length, then each whole
// 64-bit word (Fnv1a64Word), then the tail byte-wise (Fnv1a64). Eight
// times fewer steps than Fnv1a64 for bulk data (the executor's per-segment
// checksums); a change to any one word changes it.
inline uint64_t Fnv1a64Words(absl::string_view bytes) {
  uint64_t h = Fnv1a64Word(kFnv1aOffset, static_cast<uint64_t>(bytes.size()));
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = Fnv1a64Word(h, w);
  }
  return Fnv1a64(bytes.substr(i), h);
}

}  // namespace refit

#endif  // REFIT_COMMON_HASH_H_
