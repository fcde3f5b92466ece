// The digest's terms (region_digest.h) as inline functions that compile for
// the host and, under nvcc, for the device, so both compute the same sums.
#ifndef REFIT_EXEC_DELTA_DIGEST_TERM_H_
#define REFIT_EXEC_DELTA_DIGEST_TERM_H_

#include <cstdint>

#ifdef __CUDACC__
#define REFIT_HD __host__ __device__
#else
#define REFIT_HD
#endif

namespace refit {

// Byte offsets within one buffer are below 2^40 (1 TiB); buffer indices
// below 2^24.
inline constexpr int kDigestOffsetBits = 40;
inline constexpr int64_t kDigestMaxBufferIndex = (int64_t{1} << 24) - 1;
inline constexpr int64_t kDigestMaxOffset = (int64_t{1} << kDigestOffsetBits) - 1;

// The key of the byte at `offset` of engine buffer `buffer`. Unchecked: the
// caller has validated both ranges (MakePositionKey checks them).
REFIT_HD inline uint64_t PositionKey(int64_t buffer, int64_t offset) {
  return (static_cast<uint64_t>(buffer) << kDigestOffsetBits) |
         static_cast<uint64_t>(offset);
}

// splitmix64's finalizer: a bijection of 64-bit words that mixes every bit.
REFIT_HD inline uint64_t DigestMix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The digest is linear in the bytes: byte value x at key K adds
//   x * 2^(8 (K mod 4)) * L(K mod 8 < 4) * H(K - K mod 8)   (mod 2^64),
// H(k) = DigestMix64(k) | 1 the weight of the 8-byte word at key k and
// L = kDigestLaneLow / kDigestLaneHigh (odd) for its low and high 4 bytes.
// So a word's term is H(k) * (lo32 * L_low + hi32 * L_high), and the bytes
// of a word digested in parts (zeros elsewhere) add up to the whole word's.
// A changed byte always changes the sum (every weight is odd times a power
// of two below 2^32).
inline constexpr uint64_t kDigestLaneLow = 0x9e3779b1ULL;
inline constexpr uint64_t kDigestLaneHigh = 0x85ebca77ULL;

// The term of the 8-byte word at key `word_key` (a multiple of 8) holding
// `v` (little-endian; bytes outside the digested range zero).
REFIT_HD inline uint64_t DigestWord(uint64_t word_key, uint64_t v) {
  const uint64_t lanes = (v & 0xffffffffULL) * kDigestLaneLow + (v >> 32) * kDigestLaneHigh;
  return (DigestMix64(word_key) | 1) * lanes;
}

// The terms of 16 bytes (`lo`, `hi`: bytes 0-7 and 8-15, little-endian)
// whose first byte is at key `key`, cut into the 8-byte words of the key
// space.
REFIT_HD inline uint64_t Digest16(uint64_t key, uint64_t lo, uint64_t hi) {
  const int s = static_cast<int>(key & 7);
  const uint64_t k = key - s;
  if (s == 0) return DigestWord(k, lo) + DigestWord(k + 8, hi);
  const int b = 8 * s;
  return DigestWord(k, lo << b) + DigestWord(k + 8, (lo >> (64 - b)) | (hi << b)) +
         DigestWord(k + 16, hi >> (64 - b));
}

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DIGEST_TERM_H_
