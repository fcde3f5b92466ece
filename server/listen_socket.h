// A non-blocking TCP listening socket on "host:port", shared by refitd's
// gRPC listener (acceptor.h) and its /metrics server (metrics_http.h).
#ifndef REFIT_SERVER_LISTEN_SOCKET_H_
#define REFIT_SERVER_LISTEN_SOCKET_H_

#include <string>

#include "absl/status/statusor.h"

namespace refit {

struct ListenSocket {
  int fd = -1;   // non-blocking, close-on-exec; the caller closes it
  int port = 0;  // the bound port (never 0)
};

// Binds `address` ("host:port", "[v6 host]:port", ":port" for every
// address; port 0 picks one) and listens (IPv6 sockets dual stack). Fails
// with INVALID_ARGUMENT on an address without a valid port, UNAVAILABLE
// naming the address and the error when it cannot be resolved or bound.
absl::StatusOr<ListenSocket> ListenTcp(const std::string& address);

}  // namespace refit

#endif  // REFIT_SERVER_LISTEN_SOCKET_H_
