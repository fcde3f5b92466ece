// TlsServerContext: refitd's TLS listener settings as an OpenSSL context.
// refitd terminates TLS itself, in its connection relay
// (connection_relay.h), so that the frame bounds it keeps ahead of gRPC
// apply to TLS connections as to plaintext ones; gRPC then serves the
// decrypted bytes, and the bearer token is checked as before.
#ifndef REFIT_SERVER_TLS_SERVER_CONTEXT_H_
#define REFIT_SERVER_TLS_SERVER_CONTEXT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/credentials.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace refit {

class TlsServerContext {
 public:
  // A context serving `tls`'s certificate chain and key, TLS 1.2 or later,
  // offering only HTTP/2 ("h2", which gRPC clients require) by ALPN; with
  // `tls.client_ca_pem`, clients must present a certificate that CA signed.
  // Fails with INVALID_ARGUMENT naming the field ("options.tls: private
  // key ...") and OpenSSL's reason when a PEM text cannot be read or the
  // key does not match the certificate.
  static absl::StatusOr<std::unique_ptr<TlsServerContext>> Create(const TlsOptions& tls);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // A server session on the connected socket `fd` (not owned), handshake
  // not begun; the caller frees it with SSL_free. Null when OpenSSL has no
  // memory for it.
  SSL* NewSession(int fd) const;

 private:
  explicit TlsServerContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

}  // namespace refit

#endif  // REFIT_SERVER_TLS_SERVER_CONTEXT_H_
