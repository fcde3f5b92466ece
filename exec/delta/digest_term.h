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

// The definition of the digest below, reported with every digest part
// (ReportRequest.digest_scheme): members whose builds digest differently
// cannot be compared. 2: one weight per 16-byte word (the definition here);
// 1 (reported as 0): the earlier 64-bit mix per 8 bytes.
inline constexpr uint32_t kDigestScheme = 2;

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

// The digest is linear in the bytes: the 16-byte word of keys [k, k + 16)
// (k a multiple of 16) holding 32-bit lanes w0..w3 (little-endian; bytes
// outside the digested range zero) adds
//   H(k) * (w0 * L0 + w1 * L1 + w2 * L2 + w3 * L3)   (mod 2^64),
// so byte value x at key K adds x * 2^(8 (K mod 4)) * L((K mod 16) / 4) *
// H(K - K mod 16). L0..L3 are odd 32-bit constants; the word weights are
//   H(k) = S(buffer) * A^(offset / 16),   S(b) = DigestMix64(b) | 1,
// for k = PositionKey(buffer, offset): odd, and a word's weight is the
// previous word's times A, so a pass over consecutive words costs one
// multiply per word for its weight. A = 5 (mod 8) generates the units that
// are 1 (mod 4), which do not hold -1: the same change at two places never
// cancels. A changed byte always changes the sum (its weight is odd times a
// power of two below 2^32), and the bytes of a word digested in parts
// (zeros elsewhere) add up to the whole word's.
inline constexpr uint64_t kDigestA = 0x9e3779b97f4a7c15ULL;  // 5 (mod 8)
inline constexpr uint32_t kDigestLane0 = 0x9e3779b1u;
inline constexpr uint32_t kDigestLane1 = 0x85ebca77u;
inline constexpr uint32_t kDigestLane2 = 0xc2b2ae3du;
inline constexpr uint32_t kDigestLane3 = 0x27d4eb2fu;

// a^n (mod 2^64).
REFIT_HD constexpr uint64_t DigestPow(uint64_t a, uint64_t n) {
  uint64_t r = 1;
  while (n != 0) {
    if (n & 1) r *= a;
    a *= a;
    n >>= 1;
  }
  return r;
}

// The weight step over 32 words: a warp's pass of 512 bytes.
inline constexpr uint64_t kDigestA32 = DigestPow(kDigestA, 32);

// H(k) of the 16-byte word at key `word_key` (its low 4 bits are ignored).
REFIT_HD inline uint64_t DigestWeight(uint64_t word_key) {
  const uint64_t buffer = word_key >> kDigestOffsetBits;
  const uint64_t offset = word_key & ((uint64_t{1} << kDigestOffsetBits) - 1);
  return (DigestMix64(buffer) | 1) * DigestPow(kDigestA, offset >> 4);
}

// The lanes' sum of one 16-byte word (lo: bytes 0-7, hi: bytes 8-15).
REFIT_HD inline uint64_t DigestLanes(uint64_t lo, uint64_t hi) {
  return static_cast<uint64_t>(static_cast<uint32_t>(lo)) * kDigestLane0 +
         (lo >> 32) * kDigestLane1 + static_cast<uint64_t>(static_cast<uint32_t>(hi)) * kDigestLane2 +
         (hi >> 32) * kDigestLane3;
}

// The terms of 16 bytes (`lo`, `hi`: bytes 0-7 and 8-15, little-endian)
// whose first byte is at key `key`, given h = H(key - key mod 16): one
// word when the key is a multiple of 16, else parts of two (the second's
// weight h * A within one buffer's keys).
REFIT_HD inline uint64_t DigestChunk(uint64_t h, uint64_t key, uint64_t lo, uint64_t hi) {
  const int s = static_cast<int>(key & 15);
  if (s == 0) return h * DigestLanes(lo, hi);
  // Bytes [0, 16 - s) of the chunk are bytes [s, 16) of the first word;
  // bytes [16 - s, 16) are bytes [0, s) of the second.
  uint64_t a_lo, a_hi, b_lo, b_hi;
  if (s < 8) {
    const int b = 8 * s;
    a_lo = lo << b;
    a_hi = (hi << b) | (lo >> (64 - b));
    b_lo = hi >> (64 - b);
    b_hi = 0;
  } else if (s == 8) {
    a_lo = 0;
    a_hi = lo;
    b_lo = hi;
    b_hi = 0;
  } else {
    const int b = 8 * s - 64;
    a_lo = 0;
    a_hi = lo << b;
    b_lo = (lo >> (64 - b)) | (hi << b);
    b_hi = hi >> (64 - b);
  }
  // The second word's weight: the next power, unless the first word lies
  // in another buffer's key range (a chunk begun before its run's first
  // key, whose bytes there are zeros).
  const uint64_t k = key - s;
  const uint64_t h2 = ((k ^ (k + 16)) >> kDigestOffsetBits) == 0 ? h * kDigestA
                                                                 : DigestWeight(k + 16);
  return h * DigestLanes(a_lo, a_hi) + h2 * DigestLanes(b_lo, b_hi);
}

// The same, finding h itself (a power: for single chunks and tests).
REFIT_HD inline uint64_t Digest16(uint64_t key, uint64_t lo, uint64_t hi) {
  return DigestChunk(DigestWeight(key), key, lo, hi);
}

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DIGEST_TERM_H_
