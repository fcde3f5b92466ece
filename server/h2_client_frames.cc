// H2ClientFrames (see h2_client_frames.h).
#include "server/h2_client_frames.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

constexpr size_t kPrefaceBytes = 24;  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
constexpr uint8_t kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kPing = 0x6,
                  kContinuation = 0x9;
constexpr uint8_t kEndHeaders = 0x4, kAck = 0x1;
// A reset this soon after its stream was opened is an early one.
constexpr absl::Duration kEarlyReset = absl::Seconds(1);

}  // namespace

bool FrameBudget::Spend(const H2ClientLimits& limits, absl::Time now) {
  tokens_ = std::min(limits.burst,
                     tokens_ + absl::ToDoubleSeconds(now - refilled_) * limits.per_second);
  refilled_ = std::max(refilled_, now);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool FrameBudget::Full(const H2ClientLimits& limits, absl::Time now) const {
  return tokens_ + absl::ToDoubleSeconds(now - refilled_) * limits.per_second >= limits.burst;
}

H2ClientFrames::H2ClientFrames(H2ClientLimits limits, absl::Time now, FrameBudget* resets)
    : limits_(limits),
      preface_left_(kPrefaceBytes),
      control_(limits, now),
      own_resets_(limits, now),
      resets_(resets != nullptr ? resets : &own_resets_) {}

const std::string& H2ClientFrames::Consume(absl::Span<const uint8_t> bytes, absl::Time now) {
  size_t off = 0;
  const size_t skip = std::min(preface_left_, bytes.size());
  preface_left_ -= skip;
  off += skip;
  while (off < bytes.size() && reason_.empty()) {
    if (payload_left_ > 0) {
      const size_t n = std::min(payload_left_, bytes.size() - off);
      payload_left_ -= n;
      off += n;
      if (payload_left_ == 0) frame_began_ = absl::InfiniteFuture();
      continue;
    }
    if (header_have_ == 0) frame_began_ = now;
    const size_t n = std::min(header_.size() - header_have_, bytes.size() - off);
    std::copy(bytes.begin() + off, bytes.begin() + off + n, header_.begin() + header_have_);
    header_have_ += n;
    off += n;
    if (header_have_ < header_.size()) break;
    header_have_ = 0;
    OnFrameHeader(now);
  }
  return reason_;
}

void H2ClientFrames::OnFrameHeader(absl::Time now) {
  const uint8_t* h = header_.data();
  const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
  const uint8_t type = h[3], flags = h[4];
  const uint32_t stream = ((uint32_t{h[5]} & 0x7fu) << 24) | (uint32_t{h[6]} << 16) |
                          (uint32_t{h[7]} << 8) | h[8];
  payload_left_ = len;
  if (len == 0) frame_began_ = absl::InfiniteFuture();
  if (type == kHeaders || (type == kContinuation && in_block_)) {
    if (type == kHeaders) {
      in_block_ = true;
      block_bytes_ = 0;
      block_began_ = now;
      if (stream > last_stream_ && (stream & 1) == 1) {
        last_stream_ = stream;
        opened_[(stream / 2) % opened_.size()] = {stream, now};
      }
    }
    block_bytes_ += 9 + len;
    if (block_bytes_ > limits_.max_header_block_bytes) {
      Fail(absl::StrCat("a header block of more than ", limits_.max_header_block_bytes,
                        " bytes (HEADERS and CONTINUATION frames)"));
      return;
    }
    if ((flags & kEndHeaders) != 0) {
      in_block_ = false;
      block_began_ = absl::InfiniteFuture();
    }
    return;
  }
  if (type == kPing || (type == kSettings && (flags & kAck) == 0)) {
    if (!control_.Spend(limits_, now)) {
      Fail(absl::StrCat("more than ", limits_.burst, " PINGs and SETTINGS at once (",
                        limits_.per_second, " a second allowed)"));
    }
    return;
  }
  if (type == kRstStream) {
    const Opened& o = opened_[(stream / 2) % opened_.size()];
    if (o.stream == stream && now - o.at < kEarlyReset && !resets_->Spend(limits_, now)) {
      Fail(absl::StrCat("more than ", limits_.burst, " resets of new streams at once (",
                        limits_.per_second, " a second allowed)"));
    }
  }
}

const std::string& H2ClientFrames::CheckStall(absl::Time now) {
  if (reason_.empty() && now - std::min(frame_began_, block_began_) > limits_.stall_timeout) {
    Fail(absl::StrCat(now - block_began_ > limits_.stall_timeout ? "a header block"
                                                                   : "a frame",
                      " unfinished for more than ",
                      absl::FormatDuration(limits_.stall_timeout)));
  }
  return reason_;
}

}  // namespace refit
