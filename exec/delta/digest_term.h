// The digest's term (region_digest.h) as inline functions that compile for
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

// One element's term: its value (an odd multiple, so distinct values give
// distinct words) folded into its key, then mixed.
REFIT_HD inline uint64_t DigestTerm(uint64_t key, uint64_t value) {
  return DigestMix64(key ^ (value * 0x9e3779b97f4a7c15ULL));
}

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DIGEST_TERM_H_
