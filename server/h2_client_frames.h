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
//     (RST_STREAM of a stream opened less than a second before: the "rapid
//     reset"; PING; SETTINGS) draw from a bucket of `burst` refilled at
//     `per_second`; an empty bucket ends the connection.
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

class H2ClientFrames {
 public:
  explicit H2ClientFrames(H2ClientLimits limits, absl::Time now);

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
  // Takes one token from the bucket; false when it is empty.
  bool Spend(absl::Time now);
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
  double tokens_;
  absl::Time refilled_;
  // When the most recent streams were opened, by (id / 2) % size.
  struct Opened {
    uint32_t stream = 0;
    absl::Time at;
  };
  std::array<Opened, 1024> opened_{};
};

}  // namespace refit

#endif  // REFIT_SERVER_H2_CLIENT_FRAMES_H_
