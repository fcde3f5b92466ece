// A raw TLS client (OpenSSL, ALPN h2) for adversarial tests that speak
// HTTP/2 by hand to a TLS refitd child: it trusts a CA and checks the
// server's name, or, playing the attacker, checks nothing; it may present
// a client certificate and cap the TLS version. Test-only.
#ifndef REFIT_TESTS_ADVERSARIAL_TLS_WIRE_H_
#define REFIT_TESTS_ADVERSARIAL_TLS_WIRE_H_

#include <openssl/ssl.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace refit::testing {

struct TlsWireOptions {
  std::string ca;           // PEM file trusted (empty: no certificate check)
  std::string host;         // the server name checked with `ca`
  std::string cert, key;    // the client's certificate and key (empty: none)
  int max_version = 0;      // e.g. TLS1_2_VERSION (0: OpenSSL's highest)
  std::string source;       // loopback address to dial from (empty: any)
};

class TlsWire {
 public:
  // Dials 127.0.0.1:`port` (reads and writes give up after 1 s each); the
  // handshake waits for Handshake().
  TlsWire(int port, const TlsWireOptions& options);
  ~TlsWire();
  TlsWire(const TlsWire&) = delete;
  TlsWire& operator=(const TlsWire&) = delete;

  // Returns whether the client side of the handshake finished (over TLS
  // 1.3 the server checks a client certificate after that).
  bool Handshake();
  // Sends all of `bytes`; false when empty or the connection failed.
  bool Send(const std::string& bytes);
  // Reads until the server closes the connection or `limit` passes;
  // returns the bytes read and sets `closed`.
  std::string ReadUntilClosed(absl::Duration limit, bool* closed);
  int fd() const { return fd_; }

 private:
  SSL_CTX* ctx_;
  int fd_;
  SSL* ssl_ = nullptr;
};

// Returns the error code of the last whole GOAWAY frame in `http2` (the
// bytes a server sent after the preface's exchange); -1 when there is none.
int64_t LastGoAwayCode(const std::string& http2);

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_TLS_WIRE_H_
