// ConnectionRelay (see connection_relay.h).
#include "server/connection_relay.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <climits>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/first_request.h"
#include "server/log.h"

namespace refit {
namespace {

constexpr size_t kReadBytes = 64 << 10;
// A TLS connection's first request must fit in this many bytes (as the
// connection gate's plaintext one).
constexpr size_t kFirstRequestBytes = 64 << 10;
constexpr char kNamePrefix[] = "refitd-relay-";
constexpr uint32_t kEnhanceYourCalm = 0xb;

// Where the bytes gRPC sends are in its frames: a GOAWAY may be put only
// between two of them.
class FrameBoundary {
 public:
  void Advance(const uint8_t* p, size_t n) {
    while (n > 0) {
      if (payload_left_ > 0) {
        const size_t k = std::min(payload_left_, n);
        payload_left_ -= k;
        p += k;
        n -= k;
        continue;
      }
      header_[have_++] = *p++;
      --n;
      if (have_ == 9) {
        have_ = 0;
        payload_left_ = (size_t{header_[0]} << 16) | (size_t{header_[1]} << 8) | header_[2];
      }
    }
  }
  bool at_boundary() const { return have_ == 0 && payload_left_ == 0; }

 private:
  uint8_t header_[9] = {};
  size_t have_ = 0;
  size_t payload_left_ = 0;
};

std::string GoAway(uint32_t last_stream, const std::string& reason) {
  const std::string debug = reason.substr(0, 256);
  const size_t len = 8 + debug.size();
  std::string f = {static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                   static_cast<char>(len), 7, 0, 0, 0, 0, 0};
  for (uint32_t v : {last_stream & 0x7fffffffu, kEnhanceYourCalm}) {
    for (int shift = 24; shift >= 0; shift -= 8) f.push_back(static_cast<char>(v >> shift));
  }
  return f + debug;
}

}  // namespace

struct ConnectionRelay::Side {
  int fd = -1;
  uint64_t tag = 0;      // its epoll tag
  uint32_t events = 0;   // what epoll watches for; ~0u: not in the set
  std::string out;       // read from the other side, not yet written here
  bool eof = false;      // it sent all it will
  bool shut = false;     // it was told no more bytes come (shutdown)
};

struct ConnectionRelay::Conn {
  Conn(H2ClientLimits limits, absl::Time now, SourceBudget* budget)
      : budget(budget), frames(limits, now, &budget->resets) {}
  SourceBudget* budget;
  uint64_t key = 0;
  uint64_t name = 0;
  Side client, server;
  H2ClientFrames frames;
  FrameBoundary to_client;  // over every byte read from gRPC
  absl::Time ending = absl::InfiniteFuture();  // when a side first ended
  // TLS (null: plaintext): the session, whether its handshake is still on
  // (and waits to write), whether it awaits its first request (no gRPC end
  // yet; `first` holds what it sent, `greeted`: the server preface went
  // out), and whether a read waits to write (a TLS 1.3 key update answered
  // into a full socket).
  SSL* tls = nullptr;
  bool handshaking = false;
  bool handshake_wants_write = false;
  bool awaiting_request = false;
  bool greeted = false;
  std::string first;
  bool read_wants_write = false;
  std::string peer;
  absl::Time began;
};

absl::StatusOr<std::unique_ptr<ConnectionRelay>> ConnectionRelay::Start(H2ClientLimits limits,
                                                                       HandOver hand_over,
                                                                       int max_pending) {
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (wake < 0 || ep < 0) {
    if (wake >= 0) close(wake);
    if (ep >= 0) close(ep);
    return absl::UnavailableError(
        absl::StrCat("connection relay: no descriptor: ", std::strerror(errno)));
  }
  std::unique_ptr<ConnectionRelay> r(
      new ConnectionRelay(limits, wake, std::move(hand_over), std::max(1, max_pending)));
  r->epoll_fd_ = ep;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev);
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

ConnectionRelay::ConnectionRelay(H2ClientLimits limits, int wake_fd, HandOver hand_over,
                                 int max_pending)
    : limits_(limits),
      wake_fd_(wake_fd),
      hand_over_(std::move(hand_over)),
      max_pending_(max_pending),
      names_(std::random_device()()) {}

ConnectionRelay::~ConnectionRelay() { Stop(); }

void ConnectionRelay::Stop() {
  if (stop_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  while (!conns_.empty()) Close(*conns_.begin()->second);
  absl::MutexLock lock(&mu_);
  for (const Incoming& in : incoming_) {
    SSL_free(in.tls);
    close(in.client);
    if (in.relay >= 0) close(in.relay);
  }
  incoming_.clear();
  close(epoll_fd_);
  close(wake_fd_);
}

absl::StatusOr<int> ConnectionRelay::Pair(int* relay_end, const std::string& peer,
                                           uint64_t* name) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connection relay: no socket pair for ", peer, ": ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  *name = names_();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string text = absl::StrCat(kNamePrefix, absl::Hex(*name, absl::kZeroPad16));
  std::memcpy(addr.sun_path + 1, text.data(), text.size());  // abstract: sun_path[0] = 0
  // Without the name (taken: never, in practice) gRPC's peer is "unix:".
  if (bind(pair[0], reinterpret_cast<sockaddr*>(&addr),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size())) == 0) {
    peers_[*name] = peer;
  }
  *relay_end = pair[0];
  return pair[1];
}

absl::StatusOr<int> ConnectionRelay::Relay(int client, std::string peer, std::string source) {
  int relay_end = -1;
  uint64_t name = 0;
  absl::StatusOr<int> grpc_end = Pair(&relay_end, peer, &name);
  if (!grpc_end.ok()) return grpc_end.status();
  absl::MutexLock lock(&mu_);
  incoming_.push_back({client, relay_end, name, std::move(source), nullptr, ""});
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  return grpc_end;
}

void ConnectionRelay::RelayTls(int client, SSL* tls, std::string peer, std::string source) {
  absl::MutexLock lock(&mu_);
  incoming_.push_back({client, -1, 0, std::move(source), tls, std::move(peer)});
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

std::string ConnectionRelay::RealPeer(absl::string_view grpc_peer) const {
  const size_t at = grpc_peer.find(kNamePrefix);
  uint64_t name = 0;
  if (at == absl::string_view::npos ||
      !absl::SimpleHexAtoi(grpc_peer.substr(at + sizeof(kNamePrefix) - 1, 16), &name)) {
    return std::string(grpc_peer);
  }
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(name);
  return it == peers_.end() ? std::string(grpc_peer) : it->second;
}

void ConnectionRelay::Adopt() {
  uint64_t count;
  (void)!read(wake_fd_, &count, sizeof(count));
  std::deque<Incoming> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(incoming_);
  }
  const absl::Time now = absl::Now();
  for (const Incoming& in : taken) {
    std::unique_ptr<SourceBudget>& budget = budgets_[in.source];
    if (budget == nullptr) budget = std::make_unique<SourceBudget>(limits_, now);
    ++budget->conns;
    if (in.tls != nullptr && static_cast<int>(pending_.size()) >= max_pending_) {
      // Held before their first request: the oldest of those from the
      // address holding the most gives way.
      std::optional<PendingConnections::Entry> victim = pending_.TakeVictim();
      auto it = victim ? conns_.find(victim->tag) : conns_.end();
      if (it != conns_.end()) Close(*it->second);
    }
    auto c = std::make_unique<Conn>(limits_, now, budget.get());
    c->key = ++next_key_;
    c->name = in.name;
    c->client.fd = in.client;
    c->client.tag = c->key << 1;
    c->client.events = ~0u;
    c->server.fd = in.relay;
    c->server.tag = (c->key << 1) | 1;
    c->server.events = ~0u;
    c->tls = in.tls;
    c->handshaking = in.tls != nullptr;
    c->peer = in.peer;
    c->began = now;
    if (in.tls != nullptr) {
      PendingConnections::Entry e;
      e.fd = in.client;
      e.tag = c->key;
      e.accepted = now;
      e.source = in.source;
      pending_.Add(std::move(e));
    }
    Conn& ref = *c;
    conns_[c->key] = std::move(c);
    Settle(ref);
  }
}

void ConnectionRelay::Loop() {
  std::vector<epoll_event> events(256);
  absl::Time last_check = absl::Now();
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    const absl::Time now = absl::Now();
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == 0) {
        Adopt();
        continue;
      }
      auto it = conns_.find(tag >> 1);
      if (it == conns_.end()) continue;  // closed earlier in this batch
      Service(*it->second, (tag & 1) == 0, events[i].events, now);
    }
    if (now - last_check >= absl::Milliseconds(250)) {
      last_check = now;
      CheckDeadlines(now);
    }
  }
}

void ConnectionRelay::Service(Conn& c, bool client_side, uint32_t events, absl::Time now) {
  const uint64_t key = c.key;
  Side& s = client_side ? c.client : c.server;
  // A broken socket, or a client that can neither send nor receive.
  if ((events & EPOLLERR) != 0 || (client_side && (events & EPOLLHUP) != 0) ||
      (c.handshaking && !client_side && (events & EPOLLHUP) != 0)) {
    Close(c);
    return;
  }
  if (c.handshaking || c.awaiting_request) {
    if (c.handshaking && client_side) Handshake(c, now);
    if (conns_.find(key) == conns_.end()) return;
    if (c.awaiting_request && (events & EPOLLOUT) != 0) {
      c.read_wants_write = false;
      if (!c.client.out.empty()) Flush(c, c.client);
    }
    if (conns_.find(key) != conns_.end() && c.awaiting_request) AwaitRequest(c, now);
    if (conns_.find(key) == conns_.end()) return;
    if (c.handshaking || c.awaiting_request) {
      Settle(c);
      return;
    }
    // Paired just now: on to what the client and OpenSSL hold.
  }
  if (client_side && c.read_wants_write && (events & EPOLLOUT) != 0) {
    c.read_wants_write = false;
    Pump(c, true, now);
    if (conns_.find(key) == conns_.end()) return;
  }
  if ((events & EPOLLOUT) != 0 && !s.out.empty()) Flush(c, s);
  if (conns_.find(key) == conns_.end()) return;
  if (!client_side && (events & EPOLLHUP) != 0) {
    DrainServer(c, now);  // gRPC closed its end
  } else if ((events & EPOLLIN) != 0 && !s.eof) {
    Pump(c, client_side, now);
  }
  // Decrypted bytes OpenSSL holds wake no epoll wait: take them while
  // gRPC's side has room.
  while (conns_.find(key) != conns_.end() && c.tls != nullptr && !c.awaiting_request &&
         !c.client.eof && c.server.out.empty() && SSL_pending(c.tls) > 0) {
    Pump(c, true, now);
  }
  if (conns_.find(key) == conns_.end()) return;
  Settle(c);
}

void ConnectionRelay::Handshake(Conn& c, absl::Time now) {
  ERR_clear_error();
  const int r = SSL_do_handshake(c.tls);
  if (r == 1) {
    c.handshaking = false;
    c.handshake_wants_write = false;
    c.awaiting_request = true;
    return;
  }
  const int e = SSL_get_error(c.tls, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    c.handshake_wants_write = e == SSL_ERROR_WANT_WRITE;
    return;
  }
  char reason[256] = "the client closed the connection";
  if (const unsigned long err = ERR_get_error()) ERR_error_string_n(err, reason, sizeof(reason));
  ERR_clear_error();
  if (now - last_tls_log_ > absl::Seconds(10)) {
    last_tls_log_ = now;
    ServerLog().info("TLS handshake failed: {} ({} such failures so far)", reason,
                     tls_failed_ + 1);
  }
  ++tls_failed_;
  Close(c);
}

void ConnectionRelay::AwaitRequest(Conn& c, absl::Time now) {
  const uint64_t key = c.key;
  static thread_local std::vector<char> buf(16 << 10);
  FirstBytes state = FirstBytes::kIncomplete;
  // Read until the first request is whole, or the bytes are not HTTP/2 or
  // past kFirstRequestBytes: what is held stays within one read of it.
  while (state == FirstBytes::kIncomplete || state == FirstBytes::kAwaitingRequest) {
    const ssize_t n = Receive(c, c.client, buf.data(), buf.size());
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      Close(c);
      return;
    }
    if (n < 0) break;
    const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
    const std::string& reason = c.frames.Consume(absl::MakeConstSpan(bytes, n), now);
    if (!reason.empty()) {
      Abort(c, reason);
      return;
    }
    c.first.append(buf.data(), static_cast<size_t>(n));
    state = ClassifyFirstBytes(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(c.first.data()), c.first.size()),
        kFirstRequestBytes);
  }
  if (state == FirstBytes::kAwaitingRequest && !c.greeted) {
    // The server's preface, so that the client sends its first request.
    c.greeted = true;
    if (!Write(c, c.client, reinterpret_cast<const char*>(kServerPreface),
               sizeof(kServerPreface))) {
      return;
    }
  }
  if (state == FirstBytes::kNotHttp2 || state == FirstBytes::kOversized) {
    Close(c);
    return;
  }
  if (state == FirstBytes::kRequest && conns_.find(key) != conns_.end()) StartRelaying(c);
}

void ConnectionRelay::StartRelaying(Conn& c) {
  int relay_end = -1;
  absl::StatusOr<int> grpc_end = hand_over_ == nullptr
                                     ? absl::FailedPreconditionError("no gRPC to hand over to")
                                     : Pair(&relay_end, c.peer, &c.name);
  if (!grpc_end.ok()) {
    Close(c);
    return;
  }
  const uint64_t key = c.key;
  pending_.Filter([key](PendingConnections::Entry& e) { return e.tag != key; });
  c.awaiting_request = false;
  c.server.fd = relay_end;
  c.server.tag = (c.key << 1) | 1;
  c.server.events = ~0u;
  c.server.out = std::move(c.first);
  c.first.clear();
  hand_over_(*grpc_end);
  Flush(c, c.server);
}

ssize_t ConnectionRelay::Receive(Conn& c, Side& from, char* buf, size_t n) {
  if (&from != &c.client || c.tls == nullptr) return recv(from.fd, buf, n, MSG_DONTWAIT);
  ERR_clear_error();
  const int r = SSL_read(c.tls, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) return r;
  switch (SSL_get_error(c.tls, r)) {
    case SSL_ERROR_WANT_READ:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      c.read_wants_write = true;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;  // the client's close_notify, or its end of the stream
    default:
      ERR_clear_error();
      errno = ECONNRESET;
      return -1;
  }
}

ssize_t ConnectionRelay::Send(Conn& c, Side& to, const char* data, size_t n) {
  if (&to != &c.client || c.tls == nullptr) {
    return send(to.fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (n == 0) return 0;
  ERR_clear_error();
  const int r = SSL_write(c.tls, data, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) return r;
  const int e = SSL_get_error(c.tls, r);
  ERR_clear_error();
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

void ConnectionRelay::DrainServer(Conn& c, absl::Time now) {
  static thread_local std::vector<char> buf(kReadBytes);
  for (;;) {
    const ssize_t n = recv(c.server.fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) {
      c.server.eof = true;
      if (c.ending == absl::InfiniteFuture()) c.ending = now;
      break;
    }
    c.to_client.Advance(reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(n));
    c.client.out.append(buf.data(), static_cast<size_t>(n));
  }
  if (!c.client.out.empty()) Flush(c, c.client);
}

void ConnectionRelay::Pump(Conn& c, bool from_client, absl::Time now) {
  Side& from = from_client ? c.client : c.server;
  Side& to = from_client ? c.server : c.client;
  if (!to.out.empty()) return;  // the other side first takes what it has
  static thread_local std::vector<char> buf(kReadBytes);
  const ssize_t n = Receive(c, from, buf.data(), buf.size());
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Close(c);
    return;
  }
  if (n == 0) {
    from.eof = true;
    if (c.ending == absl::InfiniteFuture()) c.ending = now;
    return;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
  if (from_client) {
    const std::string& reason = c.frames.Consume(absl::MakeConstSpan(bytes, n), now);
    if (!reason.empty()) {
      Abort(c, reason);
      return;
    }
  } else {
    c.to_client.Advance(bytes, static_cast<size_t>(n));
  }
  Write(c, to, buf.data(), static_cast<size_t>(n));
}

bool ConnectionRelay::Write(Conn& c, Side& to, const char* data, size_t n) {
  ssize_t w = 0;
  if (to.out.empty()) {
    w = Send(c, to, data, n);
    if (w < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        Close(c);
        return false;
      }
      w = 0;
    }
  }
  to.out.append(data + w, n - static_cast<size_t>(w));
  return true;
}

void ConnectionRelay::Flush(Conn& c, Side& to) {
  const ssize_t w = Send(c, to, to.out.data(), to.out.size());
  if (w < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Close(c);
    return;
  }
  to.out.erase(0, static_cast<size_t>(w));
  if (to.out.empty() && to.out.capacity() > 4096) std::string().swap(to.out);
}

void ConnectionRelay::Settle(Conn& c) {
  if (c.handshaking) {  // no gRPC end yet
    Watch(c.client, c.handshake_wants_write ? EPOLLOUT : EPOLLIN);
    return;
  }
  if (c.awaiting_request) {
    Watch(c.client, EPOLLIN | (c.client.out.empty() && !c.read_wants_write ? 0 : EPOLLOUT));
    return;
  }
  // gRPC closed its end: what it sent reaches the client, then both close.
  if (c.server.eof && c.client.out.empty()) {
    Close(c);
    return;
  }
  // The client sent all it will: gRPC learns it once it has every byte.
  if (c.client.eof && c.server.out.empty() && !c.server.shut) {
    shutdown(c.server.fd, SHUT_WR);
    c.server.shut = true;
  }
  Watch(c.client,
        (c.server.out.empty() && !c.client.eof ? EPOLLIN : 0) |
            (c.client.out.empty() && !c.read_wants_write ? 0 : EPOLLOUT));
  Watch(c.server,
        (c.client.out.empty() && !c.server.eof ? EPOLLIN : 0) |
            (c.server.out.empty() ? 0 : EPOLLOUT));
}

void ConnectionRelay::Watch(Side& s, uint32_t events) {
  // A side that ended and has nothing to take is watched no more (a closed
  // local socket would report its hang-up at every wait).
  if (s.eof && s.out.empty()) {
    if (s.events != ~0u) {
      epoll_event ev{};
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.fd, &ev);
      s.events = ~0u;
    }
    return;
  }
  if (s.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = s.tag;
  const int op = s.events == ~0u ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_fd_, op, s.fd, &ev) == 0) s.events = events;
}

void ConnectionRelay::Abort(Conn& c, const std::string& reason) {
  closed_for_abuse_.fetch_add(1);
  if (!c.handshaking && c.to_client.at_boundary()) {
    const std::string goaway = GoAway(c.frames.last_stream(), reason);
    c.client.out += goaway;
    (void)!Send(c, c.client, c.client.out.data(), c.client.out.size());
  }
  const absl::Time now = absl::Now();
  const int64_t closed = closed_for_abuse_.load();
  if (now - last_abuse_log_ > absl::Seconds(10)) {
    last_abuse_log_ = now;
    std::string peer;
    {
      absl::MutexLock lock(&mu_);
      auto it = peers_.find(c.name);
      if (it != peers_.end()) peer = it->second;
    }
    ServerLog().warn("closed the connection from {}: {} ({} connections closed so far for "
                     "leaving the HTTP/2 bounds, {} since the last such line)",
                     peer, reason, closed, closed - abuse_logged_);
    abuse_logged_ = closed;
  }
  Close(c);
}

void ConnectionRelay::Close(Conn& c) {
  for (Side* s : {&c.client, &c.server}) {
    if (s->fd < 0) continue;  // a TLS connection not paired yet
    if (s->events != ~0u) {
      epoll_event ev{};
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd, &ev);
    }
    close(s->fd);
  }
  if (c.handshaking || c.awaiting_request) {
    const uint64_t key = c.key;
    pending_.Filter([key](PendingConnections::Entry& e) { return e.tag != key; });
  }
  SSL_free(c.tls);  // null: nothing
  {
    absl::MutexLock lock(&mu_);
    peers_.erase(c.name);
  }
  --c.budget->conns;
  conns_.erase(c.key);  // destroys c
}

void ConnectionRelay::CheckDeadlines(absl::Time now) {
  std::vector<uint64_t> stalled, ended;
  for (auto& [key, c] : conns_) {
    if ((c->handshaking || c->awaiting_request) && now - c->began > limits_.stall_timeout) {
      stalled.push_back(key);
    } else if (!c->frames.CheckStall(now).empty()) {
      stalled.push_back(key);
    } else if (now - c->ending > limits_.stall_timeout) {
      ended.push_back(key);  // one side ended and the other did not follow
    }
  }
  for (uint64_t key : stalled) {
    Conn& c = *conns_[key];
    if (c.handshaking || c.awaiting_request) {
      Close(c);  // no handshake or no first request in time, as the gate does
    } else {
      Abort(c, c.frames.CheckStall(now));
    }
  }
  for (uint64_t key : ended) Close(*conns_[key]);
  absl::erase_if(budgets_, [&](const auto& entry) {
    return entry.second->conns == 0 && entry.second->resets.Full(limits_, now);
  });
}

}  // namespace refit
