// What a client sends on an HTTP/2 connection after refitd's connection gate
// handed it over (connection_relay.h), read frame header by frame header
// (payloads are skipped, never held), with the bounds gRPC 1.51's HTTP/2
// layer lacks:
//   - a header block (HEADERS and its CONTINUATION frames) of more than
//     max_header_block_bytes, frame headers counted, ends the connection
//     (gRPC 1.51 holds a CONTINUATION flood whole: gigabytes);
//   - a header block, or a frame, begun and not finished within
//     stall_timeout ends it;
//   - frames that cost the server work and no client needs at a high rate
//     draw from buckets of `burst` refilled at `per_second`, and an empty
//     bucket ends the connection: RST_STREAM of a stream opened less than a
//     second before (the "rapid reset") from a bucket the caller may share
//     between the connections of one address (so that reconnecting does not
//     refill it), PING and SETTINGS from the connection's own.
// Honest gRPC clients stay far inside these: a call's headers are a few
// hundred bytes, members ping once a second, and cancellations come from
// deadlines of calls that waited.
#ifndef REFIT_SERVER_H2_CLIENT_FRAMES_H_
#define REFIT_SERVER_H2_CLIENT_FRAMES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace refit {

struct H2ClientLimits {
  size_t max_header_block_bytes = 64 << 10;
  absl::Duration stall_timeout = absl::Seconds(10);
  double burst = 1000;        // early resets, PINGs and SETTINGS at once
  double per_second = 200;    // ... and refilled per second
};

// A token bucket (H2ClientLimits' burst and per_second).
class FrameBudget {
 public:
  FrameBudget(const H2ClientLimits& limits, absl::Time now)
      : tokens_(limits.burst), refilled_(now) {}
  // Takes one token; returns false when there is none.
  bool Spend(const H2ClientLimits& limits, absl::Time now);
  // Returns whether it is full again at `now` (nothing spent lately).
  bool Full(const H2ClientLimits& limits, absl::Time now) const;

 private:
  double tokens_;
  absl::Time refilled_;
};

class H2ClientFrames {
 public:
  // `resets`: the bucket early resets draw from (not owned; it must
  // outlive this); null: one of its own.
  H2ClientFrames(H2ClientLimits limits, absl::Time now, FrameBudget* resets = nullptr);

  // Reads the next `bytes` the client sent (the connection preface first).
  // Returns an empty string while the client stays within the limits, else
  // the reason the connection ends ("a header block of more than 65536
  // bytes"); once it returned a reason, it keeps returning it.
  const std::string& Consume(absl::Span<const uint8_t> bytes, absl::Time now);

  // Returns the reason the connection ends at `now` because a frame or a
  // header block begun stalled past stall_timeout; empty when none did.
  const std::string& CheckStall(absl::Time now);

  // Returns the highest stream id the client opened (for a GOAWAY).
  uint32_t last_stream() const { return last_stream_; }

 private:
  // Handles a whole frame header (in header_).
  void OnFrameHeader(absl::Time now);
  void Fail(std::string reason) {
    if (reason_.empty()) reason_ = std::move(reason);
  }

  const H2ClientLimits limits_;
  std::string reason_;
  size_t preface_left_;
  std::array<uint8_t, 9> header_{};
  size_t header_have_ = 0;
  size_t payload_left_ = 0;
  absl::Time frame_began_ = absl::InfiniteFuture();  // a frame is partly read
  bool in_block_ = false;                            // a header block is open
  size_t block_bytes_ = 0;
  absl::Time block_began_ = absl::InfiniteFuture();
  uint32_t last_stream_ = 0;
  FrameBudget control_;     // PING and SETTINGS
  FrameBudget own_resets_;  // when no shared one is given
  FrameBudget* resets_;
  // When the most recent streams were opened, by (id / 2) % size.
  struct Opened {
    uint32_t stream = 0;
    absl::Time at;
  };
  std::array<Opened, 1024> opened_{};
};

}  // namespace refit

#endif  // REFIT_SERVER_H2_CLIENT_FRAMES_H_
