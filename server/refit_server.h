// RefitServer: refitd's gRPC service (callback API) over a Coordinator
// (coordinator.h), which holds the state: member registrations, the plan per
// membership, weight-version rounds, the data-plane bootstrap key-value
// store. The service translates each RPC into one coordinator call, serves
// grpc.health.v1, and secures the listener (credentials.h).
#ifndef REFIT_SERVER_REFIT_SERVER_H_
#define REFIT_SERVER_REFIT_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/coordinator_options.h"
#include "server/credentials.h"
#include "server/plan_function.h"

namespace refit {

class RefitServer {
 public:
  struct Options {
    std::string address = "127.0.0.1:0";  // host:port; port 0 picks one
    // Without tls, listening on a non-loopback address needs this.
    bool allow_insecure_non_loopback = false;
    std::unique_ptr<TlsOptions> tls;   // null: insecure listener
    std::string bearer_token;          // when set, checked on every call
    // Registration, planning, rounds and the key-value store
    // (coordinator.h); its plan_function is required.
    CoordinatorOptions coordinator;
    // Connections that have not sent their first complete request (acceptor.h):
    // at most this many are held (to take a new one, the oldest of the
    // address holding the most is closed),
    // each for at most first_request_timeout.
    int max_pending_connections = 256;
    absl::Duration first_request_timeout = absl::Seconds(10);
    absl::Duration max_wait = absl::Minutes(10);  // cap of any server wait
    // Shutdown: how long the health service says NOT_SERVING, calls still
    // answered, before the round in flight is aborted and the listener
    // stops (so that load balancers and members see it first).
    absl::Duration drain = absl::ZeroDuration();
  };

  // Starts serving on refitd's own listener (acceptor.h: it keeps
  // accepting at the open-file limit and closes connections that stall
  // before their first request). Compressed messages are refused
  // (UNIMPLEMENTED, before any byte is inflated): a small compressed message
  // could otherwise inflate far past max_metadata_bytes. Fails with INVALID_ARGUMENT on bad
  // options (no plan function, an address that is not host:port, insecure
  // non-loopback address without the override, TLS without certificate or
  // key), UNAVAILABLE when the address cannot be bound (or the TLS material
  // cannot be used).
  static absl::StatusOr<std::unique_ptr<RefitServer>> Start(Options options);

  ~RefitServer();

  // Returns the bound port (never 0).
  int port() const;

  // Returns the Prometheus text exposition of refitd's metrics
  // (server/metrics.h), members counted now.
  std::string MetricsText() const;

  // Returns whether refitd serves: true from Start until Shutdown begins
  // (what grpc.health.v1 says).
  bool serving() const;

  // Sets the health service NOT_SERVING, waits options.drain, aborts a
  // round in flight (members told, reason "refitd shutting down"), stops
  // accepting calls, ends open streams and waits, then returns. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit RefitServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace refit

#endif  // REFIT_SERVER_REFIT_SERVER_H_
