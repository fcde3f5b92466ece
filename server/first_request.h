// What a new connection has sent before refitd's connection gate
// (acceptor.h) hands it to gRPC. Plaintext: the HTTP/2 client preface, then
// frames of a 9-byte header each (length, type, flags, stream id), until
// the first complete HEADERS block (a HEADERS or CONTINUATION frame with
// END_HEADERS). TLS: the client's first TLS record.
#ifndef REFIT_SERVER_FIRST_REQUEST_H_
#define REFIT_SERVER_FIRST_REQUEST_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace refit {

enum class FirstBytes {
  kIncomplete,       // fewer bytes than the client preface, all matching it
  kAwaitingRequest,  // the preface, and no complete HEADERS block yet
  kRequest,          // the preface and a complete HEADERS block
  kNotHttp2,         // bytes that are not the HTTP/2 client preface
  kOversized,        // `limit` bytes or more and still no complete request
};

// The server connection preface refitd sends for gRPC once it saw the
// client's: an empty SETTINGS frame. Clients that wait for the server's
// SETTINGS before their first request (gRPC's own) then send it at once.
inline constexpr unsigned char kServerPreface[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};

// Returns what `bytes` (everything the connection sent so far) amount to;
// kOversized once `limit` bytes hold no complete request (a first header
// block no gRPC client sends, or frames that only fill the buffer). Never
// fails.
FirstBytes ClassifyFirstBytes(absl::Span<const uint8_t> bytes, size_t limit);

// Returns what `bytes` amount to on a TLS listener, where the first request
// is the client's first TLS record (its ClientHello): kRequest once a whole
// handshake record arrived, kAwaitingRequest before, kNotHttp2 for bytes
// that are no TLS handshake record (gRPC's handshake refuses them). Never
// fails.
FirstBytes ClassifyFirstTlsBytes(absl::Span<const uint8_t> bytes);

}  // namespace refit

#endif  // REFIT_SERVER_FIRST_REQUEST_H_
