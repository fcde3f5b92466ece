// Acceptor: refitd's TCP listener, ahead of gRPC. It accepts connections on
// a thread of its own and hands each to the gRPC server (an external
// connection acceptor made with the listener's credentials, so TLS and the
// bearer token apply as on gRPC's own listener).
//
// Why not gRPC's own listener: in gRPC 1.51 it stops accepting for good the
// first time accept4 fails with EMFILE (the process's open-file limit), and
// a refitd with ~1,000 members meets that limit at the common nofile=1024.
// This acceptor survives it: it holds one spare descriptor, and when an
// accept fails for lack of descriptors it frees the spare, accepts the
// waiting connection and closes it at once (the client sees the connection
// reset and retries with its backoff), takes the spare back, and pauses
// briefly. Connections already open are served throughout; new ones are
// taken again as soon as descriptors are free.
#ifndef REFIT_SERVER_ACCEPTOR_H_
#define REFIT_SERVER_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"

namespace refit {

class Acceptor {
 public:
  // Binds `address` ("host:port", "[v6 host]:port"; port 0 picks one) and
  // listens. Fails with INVALID_ARGUMENT on an address without a port,
  // UNAVAILABLE naming the address and the error when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Listen(const std::string& address);

  // Stops (see Stop).
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Returns the bound port (never 0).
  int port() const { return port_; }

  // Starts handing accepted connections to `target` (not owned; it must
  // outlive Stop). Call once.
  void Start(grpc::experimental::ExternalConnectionAcceptor* target);

  // Stops accepting, joins the thread (within ~100 ms) and closes the
  // listening socket. Idempotent.
  void Stop();

  // Returns how many connections were closed at once because the process
  // had no descriptor left for them.
  int64_t refused() const { return refused_.load(); }

 private:
  Acceptor(int listen_fd, int port);
  void Loop();
  // Handles an accept that failed with `err`; returns how long to pause.
  int PauseMsAfter(int err);

  const int listen_fd_;
  const int port_;
  int spare_fd_ = -1;  // held for the moment the limit is reached
  absl::Time last_log_ = absl::InfinitePast();  // of a failed accept
  grpc::experimental::ExternalConnectionAcceptor* target_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

}  // namespace refit

#endif  // REFIT_SERVER_ACCEPTOR_H_
