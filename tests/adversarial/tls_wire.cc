#include "tests/adversarial/tls_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"
#include "tests/adversarial/h2_wire.h"

namespace refit::testing {

TlsWire::TlsWire(int port, const TlsWireOptions& options)
    : ctx_(SSL_CTX_new(TLS_client_method())), fd_(Dial(port, options.source)) {
  if (options.max_version != 0) SSL_CTX_set_max_proto_version(ctx_, options.max_version);
  if (!options.ca.empty()) {
    SSL_CTX_load_verify_locations(ctx_, options.ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  }
  if (!options.cert.empty()) {
    SSL_CTX_use_certificate_file(ctx_, options.cert.c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx_, options.key.c_str(), SSL_FILETYPE_PEM);
  }
  ssl_ = SSL_new(ctx_);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl_, kH2, sizeof(kH2));
  if (!options.host.empty()) SSL_set1_host(ssl_, options.host.c_str());
  SSL_set_fd(ssl_, fd_);
  timeval t{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof(t));
}

TlsWire::~TlsWire() {
  SSL_free(ssl_);
  SSL_CTX_free(ctx_);
  if (fd_ >= 0) close(fd_);
}

bool TlsWire::Handshake() { return fd_ >= 0 && SSL_connect(ssl_) == 1; }

bool TlsWire::Send(const std::string& bytes) {
  return !bytes.empty() &&
         SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) ==
             static_cast<int>(bytes.size());
}

std::string TlsWire::ReadUntilClosed(absl::Duration limit, bool* closed) {
  std::string in;
  *closed = false;
  for (const absl::Time until = absl::Now() + limit; absl::Now() < until;) {
    char buf[16384];
    const int n = SSL_read(ssl_, buf, sizeof(buf));
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SSL ||
        (e == SSL_ERROR_SYSCALL && errno != EAGAIN && errno != EWOULDBLOCK)) {
      *closed = true;
      break;
    }
  }
  return in;
}

int64_t LastGoAwayCode(const std::string& in) {
  int64_t code = -1;
  for (size_t off = 0; off + 9 <= in.size();) {
    const auto* h = reinterpret_cast<const unsigned char*>(in.data() + off);
    const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
    if (off + 9 + len > in.size()) break;
    if (h[3] == 7 && len >= 8) {
      code = (int64_t{h[13]} << 24) | (h[14] << 16) | (h[15] << 8) | h[16];
    }
    off += 9 + len;
  }
  return code;
}

}  // namespace refit::testing
