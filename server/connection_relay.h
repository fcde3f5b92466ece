// ConnectionRelay: refitd's HTTP/2 connections after the connection gate
// (acceptor.h), kept in the byte path ahead of gRPC. Each
// client socket is paired with one end of a local socket pair whose other
// end gRPC serves; one thread moves the bytes both ways and reads the
// client's frame headers (h2_client_frames.h): a client past those bounds
// (a CONTINUATION flood, a rapid reset, a stalled frame or header block)
// gets a GOAWAY (ENHANCE_YOUR_CALM, the reason as debug data) and both
// ends are closed, which frees whatever gRPC held for the connection.
// Payloads are never held beyond one read (64 KiB) a direction: a side that
// does not take its bytes stops reading from the other.
//
// TLS connections are terminated here: the relay runs the handshake, then
// holds the connection (one descriptor, no gRPC end yet) until its first
// complete request, as the connection gate holds a plaintext one: both
// within the stall timeout, at most `max_pending` at once (a new one closes
// the oldest of those from the address holding the most). Then it pairs
// the connection, hands gRPC its end and applies the same bounds to the
// decrypted frames.
//
// gRPC sees the socket pair's end, not the client's address: the relay's
// end is bound to a unique abstract name ("refitd-relay-<random hex>"), and
// RealPeer turns gRPC's peer string back into the client's.
#ifndef REFIT_SERVER_CONNECTION_RELAY_H_
#define REFIT_SERVER_CONNECTION_RELAY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/h2_client_frames.h"
#include "server/pending_connections.h"

typedef struct ssl_st SSL;

namespace refit {

class ConnectionRelay {
 public:
  // Gives gRPC a TLS connection's plaintext end (called on the relay's
  // thread; it owns the descriptor from then on).
  using HandOver = std::function<void(int)>;

  // Starts the relay's thread. Fails with UNAVAILABLE when it has no
  // descriptor for its wake-up event.
  static absl::StatusOr<std::unique_ptr<ConnectionRelay>> Start(H2ClientLimits limits,
                                                               HandOver hand_over = nullptr,
                                                               int max_pending = 256);

  // Stops (see Stop).
  ~ConnectionRelay();
  ConnectionRelay(const ConnectionRelay&) = delete;
  ConnectionRelay& operator=(const ConnectionRelay&) = delete;

  // Takes `client` (a connected non-blocking socket whose first bytes are
  // the HTTP/2 client preface, none of them read yet), from `peer` (as
  // gRPC writes a peer: "ipv4:10.0.0.1:5000"), whose early resets draw
  // from one bucket with every connection of `source` (its address).
  // Returns the descriptor to hand to gRPC (the other end of the relay's
  // socket pair). Fails with UNAVAILABLE when no socket pair could be made
  // (the process has no descriptor left); `client` is then still the
  // caller's.
  absl::StatusOr<int> Relay(int client, std::string peer, std::string source);

  // Takes `client` (its TLS ClientHello not read yet) with `tls`, a server
  // session on it (TlsServerContext::NewSession); the relay owns both. It
  // runs the handshake, waits for the first request, then hands gRPC its
  // end through the HandOver given to Start (none: the connection is
  // closed). A connection it cannot pair (no descriptor left) is closed.
  void RelayTls(int client, SSL* tls, std::string peer, std::string source);

  // Returns the client's address for `grpc_peer`, gRPC's peer string of a
  // relayed connection; `grpc_peer` itself for any other.
  std::string RealPeer(absl::string_view grpc_peer) const;

  // Returns how many connections were closed for leaving the bounds.
  int64_t closed_for_abuse() const { return closed_for_abuse_.load(); }

  // Stops the thread (within ~100 ms) and closes every relayed connection.
  // Idempotent.
  void Stop();

 private:
  struct Conn;
  struct Side;
  ConnectionRelay(H2ClientLimits limits, int wake_fd, HandOver hand_over, int max_pending);
  void Loop();
  void Adopt();
  void Service(Conn& c, bool client_side, uint32_t events, absl::Time now);
  void Pump(Conn& c, bool from_client, absl::Time now);
  void Handshake(Conn& c, absl::Time now);
  void AwaitRequest(Conn& c, absl::Time now);
  void StartRelaying(Conn& c);
  absl::StatusOr<int> Pair(int* relay_end, const std::string& peer, uint64_t* name);
  ssize_t Receive(Conn& c, Side& from, char* buf, size_t n);
  ssize_t Send(Conn& c, Side& to, const char* data, size_t n);
  void DrainServer(Conn& c, absl::Time now);
  bool Write(Conn& c, Side& to, const char* data, size_t n);
  void Flush(Conn& c, Side& to);
  void Settle(Conn& c);
  void Watch(Side& s, uint32_t events);
  void Abort(Conn& c, const std::string& reason);
  void Close(Conn& c);
  void CheckDeadlines(absl::Time now);

  const H2ClientLimits limits_;
  const int wake_fd_;
  const HandOver hand_over_;
  const int max_pending_;
  int epoll_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> closed_for_abuse_{0};

  mutable absl::Mutex mu_;
  struct Incoming {
    int client, relay;
    uint64_t name;
    std::string source;
    SSL* tls;           // TLS: relay is -1 (paired after the first request)
    std::string peer;   // TLS only
  };
  std::deque<Incoming> incoming_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::string> peers_ ABSL_GUARDED_BY(mu_);  // by name
  std::mt19937_64 names_ ABSL_GUARDED_BY(mu_);

  // The relay thread's own.
  uint64_t next_key_ = 0;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  // TLS connections before their first request (tag: the Conn's key).
  PendingConnections pending_;
  // Early-reset buckets by source, kept while a connection from it is open
  // or the bucket is not full again.
  struct SourceBudget {
    explicit SourceBudget(const H2ClientLimits& limits, absl::Time now) : resets(limits, now) {}
    FrameBudget resets;
    int conns = 0;
  };
  absl::flat_hash_map<std::string, std::unique_ptr<SourceBudget>> budgets_;
  int64_t abuse_logged_ = 0;
  int64_t tls_failed_ = 0;
  absl::Time last_tls_log_ = absl::InfinitePast();
  absl::Time last_abuse_log_ = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace refit

#endif  // REFIT_SERVER_CONNECTION_RELAY_H_
