// `refit health`: asks refitd's grpc.health.v1 service whether it serves
// (the check load balancers and orchestrators use; no token needed). Flag
// parsing lives in refit_main.cc.
#ifndef REFIT_CLI_HEALTH_COMMAND_H_
#define REFIT_CLI_HEALTH_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client_tls.h"

namespace refit {

struct HealthCommandOptions {
  std::string server;                          // "host:port" of refitd
  ClientTlsFiles tls;  // TLS to refitd (client_tls.h); no CA file: plaintext
  absl::Duration timeout = absl::Seconds(5);  // connect + answer
};

// Calls grpc.health.v1.Health/Check (all services). Returns the line to
// print when refitd answers SERVING ("refitd 127.0.0.1:50051: SERVING").
// Fails with UNAVAILABLE naming the server and what refitd said when it
// answers anything else (NOT_SERVING while it drains on SIGTERM), and with
// gRPC's error naming the server when it cannot be reached within the
// timeout (UNAVAILABLE "connection refused", DEADLINE_EXCEEDED, ...), and
// as ApplyClientTls on bad TLS flags.
absl::StatusOr<std::string> RunHealthCommand(const HealthCommandOptions& opt);

}  // namespace refit

#endif  // REFIT_CLI_HEALTH_COMMAND_H_
