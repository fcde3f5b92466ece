// FNV-1a, 64 bit: refit's one non-cryptographic hash for names, fingerprints
// and digests that must be the same in every process and on every host
// (absl::Hash is seeded per process). Not for anything an adversary picks
// to collide.
#ifndef REFIT_COMMON_HASH_H_
#define REFIT_COMMON_HASH_H_

#include <cstdint>

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

}  // namespace refit

#endif  // REFIT_COMMON_HASH_H_
