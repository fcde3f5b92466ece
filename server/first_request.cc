// ClassifyFirstBytes and ClassifyFirstTlsBytes (see first_request.h).
#include "server/first_request.h"

#include <algorithm>
#include <cstring>

namespace refit {

FirstBytes ClassifyFirstBytes(absl::Span<const uint8_t> bytes, size_t limit) {
  static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  constexpr size_t kPrefaceLen = sizeof(kPreface) - 1;
  const size_t got = bytes.size();
  if (std::memcmp(bytes.data(), kPreface, std::min(got, kPrefaceLen)) != 0) {
    return FirstBytes::kNotHttp2;
  }
  if (got < kPrefaceLen) return FirstBytes::kIncomplete;
  constexpr uint8_t kHeaders = 0x1, kContinuation = 0x9, kEndHeaders = 0x4;
  for (size_t off = kPrefaceLen; off + 9 <= got;) {
    const size_t len = (size_t{bytes[off]} << 16) | (size_t{bytes[off + 1]} << 8) | bytes[off + 2];
    const uint8_t type = bytes[off + 3], flags = bytes[off + 4];
    if (off + 9 + len > got) break;  // mid-frame
    if ((type == kHeaders || type == kContinuation) && (flags & kEndHeaders) != 0) {
      return FirstBytes::kRequest;
    }
    off += 9 + len;
  }
  return got >= limit ? FirstBytes::kOversized : FirstBytes::kAwaitingRequest;
}

FirstBytes ClassifyFirstTlsBytes(absl::Span<const uint8_t> bytes) {
  // A record: content type (22: handshake), version (2 bytes), length (2).
  constexpr uint8_t kHandshake = 22;
  if (bytes.empty()) return FirstBytes::kIncomplete;
  if (bytes[0] != kHandshake) return FirstBytes::kNotHttp2;
  if (bytes.size() < 5) return FirstBytes::kAwaitingRequest;
  const size_t len = (size_t{bytes[3]} << 8) | bytes[4];
  return bytes.size() >= 5 + len ? FirstBytes::kRequest : FirstBytes::kAwaitingRequest;
}

}  // namespace refit
