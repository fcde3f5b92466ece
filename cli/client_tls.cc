// ApplyClientTls (see client_tls.h).
#include "cli/client_tls.h"

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace refit {
namespace {

// A PEM file holds a certificate chain or a key: far below this.
constexpr int64_t kMaxPemFileBytes = int64_t{1} << 20;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  return AnnotateStatus(ReadFileToString(path, kMaxPemFileBytes), flag);
}

}  // namespace

absl::Status ApplyClientTls(const ClientTlsFiles& tls, RefitClient::Options* o) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file: give both (mutual TLS) or neither");
  }
  if (tls.ca_file.empty()) {
    if (!tls.cert_file.empty() || !tls.server_name.empty()) {
      return absl::InvalidArgumentError(
          "--tls_ca_file: required with --tls_cert_file or --tls_server_name");
    }
    return absl::OkStatus();
  }
  o->use_tls = true;
  REFIT_ASSIGN_OR_RETURN(o->root_ca_pem, ReadPem(tls.ca_file, "--tls_ca_file"));
  if (!tls.cert_file.empty()) {
    REFIT_ASSIGN_OR_RETURN(o->client_cert_pem, ReadPem(tls.cert_file, "--tls_cert_file"));
    REFIT_ASSIGN_OR_RETURN(o->client_key_pem, ReadPem(tls.key_file, "--tls_key_file"));
  }
  o->tls_server_name = tls.server_name;
  return absl::OkStatus();
}

}  // namespace refit
