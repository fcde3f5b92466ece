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
//
// New connections: on a plaintext listener a new connection is held here,
// not handed to gRPC, until it has sent its first complete request (the
// HTTP/2 preface and a whole HEADERS block). Once its preface has arrived
// the acceptor sends the server's preface (an empty SETTINGS frame), so
// clients that wait for it before their first request (gRPC's own) send
// that request at once: an honest client is handed over within a round
// trip. A connection that stalls before its first request (mid-frame,
// silent, or connected with no call) is closed after
// first_request_timeout, one whose first 64 KiB hold no complete request
// is closed at once, and at most max_pending are held: a new one closes
// the oldest of those from the address (an IPv6 /64) holding the most, and
// so does a connection that arrives when the process has no descriptor
// left. A flood from a few addresses thus closes its own connections, not
// those of members elsewhere. A TLS listener holds connections the same
// way until their first TLS record (the ClientHello, sent as soon as a
// client connects) has arrived; the relay then runs the handshake, within
// the same timeout.
//
// After the handover every connection stays in a relay
// (connection_relay.h) that bounds what gRPC 1.51's HTTP/2 layer does not:
// header blocks, stalled frames, rapid resets. The relay terminates TLS, so
// the bounds see a TLS connection's frames too, and gRPC serves plaintext
// (`target` must be made with insecure credentials and the token check).
#ifndef REFIT_SERVER_ACCEPTOR_H_
#define REFIT_SERVER_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"
#include "server/connection_relay.h"
#include "server/pending_connections.h"
#include "server/tls_server_context.h"

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

  // How new connections are held before gRPC gets them (see above).
  struct Gate {
    // TLS (held until the first TLS record, then terminated in the relay);
    // null: plaintext. Not owned; it must outlive Stop.
    const TlsServerContext* tls = nullptr;
    int max_pending = 256;
    absl::Duration first_request_timeout = absl::Seconds(10);
  };

  // Starts handing accepted connections to `target` (not owned; it must
  // outlive Stop). Call once.
  void Start(grpc::experimental::ExternalConnectionAcceptor* target, Gate gate);
  void Start(grpc::experimental::ExternalConnectionAcceptor* target) { Start(target, Gate()); }

  // Stops accepting, joins the thread (within ~100 ms) and closes the
  // listening socket. Idempotent.
  void Stop();

  // Returns how many connections were closed at once because the process
  // had no descriptor left for them.
  int64_t refused() const { return refused_.load(); }

  // Returns the client's address ("ipv4:10.0.0.1:5000") of a connection
  // gRPC names `grpc_peer`; `grpc_peer` itself when the relay does not
  // carry it.
  std::string RealPeer(absl::string_view grpc_peer) const;

  // Returns how many relayed connections were closed for leaving the
  // HTTP/2 bounds (connection_relay.h).
  int64_t closed_for_abuse() const;

  // Returns how many connections were closed before their first request
  // (stalled past the timeout, oversized, or giving way to new ones).
  int64_t stalled_closed() const { return stalled_closed_.load(); }

 private:
  Acceptor(int listen_fd, int port);
  void Loop();
  // Takes a connection just accepted from `source` (SourceKey): held when
  // gated, else handed over.
  void Take(int fd, std::string source, std::string peer);
  void HandOver(int fd);
  // Hands `fd` (from `peer`, at address `source`) to gRPC through the
  // relay; closes it when the relay has no descriptor for it.
  void Relay(int fd, std::string peer, std::string source);
  // Closes the pending connection that gives way to a new one
  // (PendingConnections::TakeVictim); false when none is pending.
  bool GiveWay();
  // Reads (without consuming) what `p` has sent; returns true when it was
  // handed over or closed, false while it is still pending.
  bool Settle(PendingConnections::Entry& p, absl::Time now);
  // Settles the pending connections with new bytes (`ready`: their sorted
  // tags) and closes those past the timeout.
  void ServicePending(const std::vector<uint64_t>& ready, absl::Time now);
  // Removes `fd` from the epoll set (before it is closed or handed over).
  void Forget(int fd);
  // Handles an accept that failed with `err`; returns how long to pause.
  int PauseMsAfter(int err);

  const int listen_fd_;
  const int port_;
  int spare_fd_ = -1;  // held for the moment the limit is reached
  absl::Time last_log_ = absl::InfinitePast();  // of a failed accept
  grpc::experimental::ExternalConnectionAcceptor* target_ = nullptr;
  Gate gate_;
  std::unique_ptr<ConnectionRelay> relay_;
  int relay_spares_[2] = {-1, -1};          // held for a relay at the limit
  // The listener (level-triggered, tag 0) and the pending connections
  // (edge-triggered: bytes peeked but not read do not wake it again).
  int epoll_fd_ = -1;
  uint64_t next_seq_ = 0;
  PendingConnections pending_;  // the acceptor thread's own
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> stalled_closed_{0};
  std::thread thread_;
};

}  // namespace refit

#endif  // REFIT_SERVER_ACCEPTOR_H_
