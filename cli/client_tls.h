// TLS to refitd for `refit status` and `refit health`: the PEM files their
// --tls_ca_file, --tls_cert_file and --tls_key_file flags name.
#ifndef REFIT_CLI_CLIENT_TLS_H_
#define REFIT_CLI_CLIENT_TLS_H_

#include <string>

#include "absl/status/status.h"
#include "client/refit_client.h"

namespace refit {

struct ClientTlsFiles {
  std::string ca_file;      // CA that signed refitd's certificate; empty: plaintext
  std::string cert_file;    // client certificate chain, for mutual TLS (optional)
  std::string key_file;     // its private key
  std::string server_name;  // name checked in refitd's certificate (default: the address's host)
};

// Fills `o`'s TLS fields from the files (use_tls when ca_file is set). Fails
// with INVALID_ARGUMENT naming the flag when a certificate or key is given
// without the other or without --tls_ca_file, and with the read error
// (NOT_FOUND, ...) naming the flag when a file cannot be read.
absl::Status ApplyClientTls(const ClientTlsFiles& tls, RefitClient::Options* o);

}  // namespace refit

#endif  // REFIT_CLI_CLIENT_TLS_H_
