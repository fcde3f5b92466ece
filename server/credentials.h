// The listener's security: TLS (optionally mutual) or plaintext, and the
// bearer token, checked once per call by gRPC's server authentication filter
// before any handler runs.
#ifndef REFIT_SERVER_CREDENTIALS_H_
#define REFIT_SERVER_CREDENTIALS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace refit {

// Security of the listener.
struct TlsOptions {
  std::string cert_chain_pem;   // server certificate chain (PEM text)
  std::string private_key_pem;  // its private key (PEM text)
  std::string client_ca_pem;    // when set: mutual TLS, clients must present
                                // a certificate signed by this CA
};

// Returns credentials for a listener: TLS per `tls` (null: plaintext), and,
// when `bearer_token` is not empty, a check of every call's metadata for
// "authorization: Bearer <token>" (compared in constant time). A call
// without it ends UNAUTHENTICATED ("missing or wrong bearer token") before
// reaching any service, and `on_refused` (when set; it must not block) is
// called; grpc.health.v1.Health needs no token. Fails with INVALID_ARGUMENT
// when `tls` lacks the certificate chain or the key.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions* tls, const std::string& bearer_token,
    std::function<void()> on_refused = nullptr);

}  // namespace refit

#endif  // REFIT_SERVER_CREDENTIALS_H_
