// RegionDigest (see region_digest.h).
#include "exec/delta/region_digest.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<uint64_t> MakePositionKey(int64_t buffer, int64_t offset) {
  if (buffer < 0 || buffer > kDigestMaxBufferIndex) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest: buffer index ", buffer, " outside [0, ", kDigestMaxBufferIndex, "]"));
  }
  if (offset < 0 || offset > kDigestMaxOffset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest: byte offset ", offset, " of buffer ", buffer, " outside [0, 2^",
        kDigestOffsetBits, ")"));
  }
  return PositionKey(buffer, offset);
}

uint64_t DigestContiguous(const void* data, int64_t bytes, int element_bytes,
                          uint64_t first_key) {
  (void)element_bytes;  // the digest is of bytes: elements only bound runs
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  int64_t i = 0;
  // 16 bytes at a time, then the rest (zeros past the end add nothing);
  // each chunk's first word is the last one's next: its weight times A.
  uint64_t h = DigestWeight(first_key);
  for (; i + 16 <= bytes; i += 16, h *= kDigestA) {
    uint64_t lo, hi;
    std::memcpy(&lo, p + i, 8);
    std::memcpy(&hi, p + i + 8, 8);
    sum += DigestChunk(h, first_key + i, lo, hi);
  }
  if (i < bytes) {
    unsigned char tail[16] = {0};
    std::memcpy(tail, p + i, bytes - i);
    uint64_t lo, hi;
    std::memcpy(&lo, tail, 8);
    std::memcpy(&hi, tail + 8, 8);
    sum += DigestChunk(h, first_key + i, lo, hi);
  }
  return sum;
}

absl::StatusOr<uint64_t> DigestRun(const void* data, int64_t bytes,
                                   int element_bytes, uint64_t first_key) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 &&
      element_bytes != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("digest: element size ", element_bytes, " is not 1, 2, 4 or 8"));
  }
  if (bytes < 0 || bytes % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest: run of ", bytes, " bytes is not a whole number of ", element_bytes,
        "-byte elements"));
  }
  const uint64_t offset = first_key & static_cast<uint64_t>(kDigestMaxOffset);
  if (offset + static_cast<uint64_t>(bytes) > static_cast<uint64_t>(kDigestMaxOffset) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest: run of ", bytes, " bytes from offset ", offset,
        " passes the end of its buffer's key range (2^", kDigestOffsetBits, ")"));
  }
  return DigestContiguous(data, bytes, element_bytes, first_key);
}

}  // namespace refit
