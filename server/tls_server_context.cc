// TlsServerContext (see tls_server_context.h).
#include "server/tls_server_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "no PEM data" : out;
}

absl::Status Invalid(const char* field, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("options.tls: ", field, ": ", what, ": ", OpenSslErrors()));
}

// Offers "h2" when the client does; else no protocol, and the handshake
// fails (gRPC speaks nothing else).
int SelectH2(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
             const unsigned char* in, unsigned int inlen, void* /*arg*/) {
  static constexpr unsigned char kH2[] = {'h', '2'};
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == sizeof(kH2) && std::memcmp(in + i + 1, kH2, sizeof(kH2)) == 0) {
      *out = in + i + 1;
      *outlen = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// The certificate chain into `ctx`: the first PEM certificate is the
// server's, the rest its chain.
absl::Status UseChain(SSL_CTX* ctx, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* leaf = bio == nullptr ? nullptr : PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  absl::Status s = absl::OkStatus();
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    s = Invalid("certificate chain", "no certificate");
  }
  while (s.ok()) {
    X509* extra = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (extra == nullptr) {
      ERR_clear_error();  // the end of the text
      break;
    }
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) {  // takes `extra`
      X509_free(extra);
      s = Invalid("certificate chain", "an intermediate certificate");
    }
  }
  X509_free(leaf);
  BIO_free(bio);
  return s;
}

absl::Status UseKey(SSL_CTX* ctx, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = bio == nullptr ? nullptr : PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) return Invalid("private key", "not a PEM private key");
  // OpenSSL refuses a key that is not the certificate's here already.
  const bool used = SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  if (!used) return Invalid("private key", "does not match the certificate");
  return absl::OkStatus();
}

// Clients must present a certificate signed by a CA in `pem`.
absl::Status RequireClientCerts(SSL_CTX* ctx, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (bio != nullptr) {
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (ca == nullptr) break;
    // Trusted, and named in the certificate request (clients that choose
    // a certificate by its issuer need the names).
    if (X509_STORE_add_cert(store, ca) == 1 && SSL_CTX_add_client_CA(ctx, ca) == 1) ++added;
    X509_free(ca);
  }
  BIO_free(bio);
  if (added == 0) return Invalid("client CA", "no certificate");
  ERR_clear_error();
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsServerContext>> TlsServerContext::Create(
    const TlsOptions& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("TLS context: ", OpenSslErrors()));
  }
  std::unique_ptr<TlsServerContext> out(new TlsServerContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // A client that closes without close_notify has ended its stream.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_alpn_select_cb(ctx, SelectH2, nullptr);
  // Sessions resume (with client certificates too, which OpenSSL refuses
  // without a session id context).
  static constexpr unsigned char kSessionContext[] = {'r', 'e', 'f', 'i', 't', 'd'};
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext));
  if (absl::Status s = UseChain(ctx, tls.cert_chain_pem); !s.ok()) return s;
  if (absl::Status s = UseKey(ctx, tls.private_key_pem); !s.ok()) return s;
  if (!tls.client_ca_pem.empty()) {
    if (absl::Status s = RequireClientCerts(ctx, tls.client_ca_pem); !s.ok()) return s;
  }
  return out;
}

TlsServerContext::~TlsServerContext() { SSL_CTX_free(ctx_); }

SSL* TlsServerContext::NewSession(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

}  // namespace refit
