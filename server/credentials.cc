// MakeServerCredentials: gRPC's C++ API accepts an AuthMetadataProcessor only
// on secure credentials, so refit builds the core credentials itself (TLS or
// insecure) and attaches its token check through the core API, which runs it
// in the server authentication filter for both.
#include "server/credentials.h"

#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/constant_time.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"
#include "grpc/slice.h"

namespace refit {
namespace {

constexpr absl::string_view kHealthService = "/grpc.health.v1.Health/";

absl::string_view View(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
                           GRPC_SLICE_LENGTH(s));
}

// The core processor's state: the expected header value, "Bearer <token>",
// and what to call on a refused call.
struct TokenCheck {
  std::string expected;
  std::function<void()> on_refused;
};

// The core processor: `state` is a TokenCheck.
void CheckBearerToken(void* state, grpc_auth_context* /*context*/,
                      const grpc_metadata* md, size_t num_md,
                      grpc_process_auth_metadata_done_cb done, void* user_data) {
  const TokenCheck& check = *static_cast<const TokenCheck*>(state);
  const std::string& expected = check.expected;
  std::string got;
  bool health = false;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = View(md[i].key);
    if (key == "authorization") got = std::string(View(md[i].value));
    if (key == ":path" && absl::StartsWith(View(md[i].value), kHealthService)) {
      health = true;
    }
  }
  if (health || ConstantTimeEquals(got, expected)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    if (check.on_refused) check.on_refused();
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
         "missing or wrong bearer token");
  }
}

void DestroyExpected(void* state) { delete static_cast<TokenCheck*>(state); }

// grpc::ServerCredentials over core credentials that already carry their
// processor.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  // `make` runs after the base class has initialized gRPC's core.
  explicit CoreServerCredentials(const std::function<grpc_server_credentials*()>& make)
      : creds_(make()) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(creds_); }

  // The processor is attached when the credentials are made; this one is
  // ignored.
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* creds_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions* tls, const std::string& bearer_token,
    std::function<void()> on_refused) {
  if (tls != nullptr &&
      (tls->cert_chain_pem.empty() || tls->private_key_pem.empty())) {
    return absl::InvalidArgumentError(
        "options.tls: certificate chain and private key are required");
  }
  auto make = [tls, &bearer_token, &on_refused]() {
    grpc_server_credentials* creds = nullptr;
    if (tls != nullptr) {
      grpc_ssl_pem_key_cert_pair pair = {tls->private_key_pem.c_str(),
                                         tls->cert_chain_pem.c_str()};
      creds = grpc_ssl_server_credentials_create_ex(
          tls->client_ca_pem.empty() ? nullptr : tls->client_ca_pem.c_str(), &pair, 1,
          tls->client_ca_pem.empty()
              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
          nullptr);
    } else {
      creds = grpc_insecure_server_credentials_create();
    }
    if (!bearer_token.empty()) {
      grpc_auth_metadata_processor processor;
      processor.process = CheckBearerToken;
      processor.destroy = DestroyExpected;
      processor.state = new TokenCheck{"Bearer " + bearer_token, on_refused};
      grpc_server_credentials_set_auth_metadata_processor(creds, processor);
    }
    return creds;
  };
  return std::shared_ptr<grpc::ServerCredentials>(new CoreServerCredentials(make));
}

}  // namespace refit
