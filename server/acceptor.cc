// Acceptor (see acceptor.h).
#include "server/acceptor.h"

#include <fcntl.h>
#include <openssl/ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/first_request.h"
#include "server/listen_socket.h"
#include "server/log.h"

namespace refit {
namespace {

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// How much of a pending connection's bytes are looked at: a first request
// must fit (gRPC clients send a few hundred bytes).
constexpr size_t kPeekBytes = 64 << 10;

// Connections accepted in one go before the pending ones are served: a
// burst of members connecting at once is not taken whole (and mostly
// closed as too many pending) before their first requests are read.
constexpr int kAcceptBatch = 32;

}  // namespace

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Listen(const std::string& address) {
  absl::StatusOr<ListenSocket> sock = ListenTcp(address);
  if (!sock.ok()) return sock.status();
  const int one = 1;
  setsockopt(sock->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::unique_ptr<Acceptor>(new Acceptor(sock->fd, sock->port));
}

Acceptor::Acceptor(int listen_fd, int port)
    : listen_fd_(listen_fd), port_(port), spare_fd_(OpenSpare()) {}

Acceptor::~Acceptor() { Stop(); }

void Acceptor::Start(grpc::experimental::ExternalConnectionAcceptor* target, Gate gate) {
  target_ = target;
  gate_ = gate;
  if (gate_.max_pending < 1) gate_.max_pending = 1;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  {
    H2ClientLimits limits;
    limits.stall_timeout = gate_.first_request_timeout;
    absl::StatusOr<std::unique_ptr<ConnectionRelay>> relay = ConnectionRelay::Start(
        limits, [this](int grpc_end) { HandOver(grpc_end); }, gate_.max_pending);
    if (relay.ok()) {
      relay_ = std::move(*relay);
      for (int& spare : relay_spares_) spare = OpenSpare();
    } else {
      ServerLog().error("{}: {}",
                        gate_.tls == nullptr ? "connections go to gRPC unbounded"
                                             : "every TLS connection is refused",
                        relay.status().ToString());
    }
  }
  thread_ = std::thread([this] { Loop(); });
}

void Acceptor::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  for (const PendingConnections::Entry& p : pending_.TakeAll()) close(p.fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  close(listen_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
  if (relay_ != nullptr) relay_->Stop();
  for (int spare : relay_spares_) {
    if (spare >= 0) close(spare);
  }
}

std::string Acceptor::RealPeer(absl::string_view grpc_peer) const {
  return relay_ == nullptr ? std::string(grpc_peer) : relay_->RealPeer(grpc_peer);
}

int64_t Acceptor::closed_for_abuse() const {
  return relay_ == nullptr ? 0 : relay_->closed_for_abuse();
}

void Acceptor::Forget(int fd) {
  epoll_event ev{};
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, &ev);
}

void Acceptor::HandOver(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
  params.listener_fd = listen_fd_;
  params.fd = fd;
  target_->HandleNewConnection(&params);  // owns fd from here
}

void Acceptor::Relay(int fd, std::string peer, std::string source) {
  if (gate_.tls != nullptr) {
    // TLS ends in the relay only (gRPC serves plaintext), which pairs the
    // connection after its first request.
    SSL* tls = relay_ == nullptr ? nullptr : gate_.tls->NewSession(fd);
    if (tls == nullptr) {
      close(fd);
      refused_.fetch_add(1);
      return;
    }
    relay_->RelayTls(fd, tls, std::move(peer), std::move(source));
    return;
  }
  if (relay_ == nullptr) {
    HandOver(fd);
    return;
  }
  absl::StatusOr<int> grpc_end = relay_->Relay(fd, peer, source);
  if (!grpc_end.ok() && relay_spares_[0] >= 0) {
    // At the open-file limit: the two spares make room for this one, and
    // are taken back as descriptors free.
    for (int& spare : relay_spares_) close(std::exchange(spare, -1));
    grpc_end = relay_->Relay(fd, peer, source);
  }
  if (relay_spares_[0] < 0) {
    for (int& spare : relay_spares_) spare = OpenSpare();
    if (relay_spares_[1] < 0) close(std::exchange(relay_spares_[0], -1));
  }
  if (!grpc_end.ok()) {
    close(fd);
    refused_.fetch_add(1);
    return;
  }
  HandOver(*grpc_end);
}

void Acceptor::Take(int fd, std::string source, std::string peer) {
  while (static_cast<int>(pending_.size()) >= gate_.max_pending) GiveWay();
  const uint64_t seq = ++next_seq_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = seq;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    // Cannot watch it: the relay takes it as it is.
    Relay(fd, std::move(peer), std::move(source));
    return;
  }
  PendingConnections::Entry p;
  p.fd = fd;
  p.tag = seq;
  p.accepted = absl::Now();
  p.source = std::move(source);
  p.peer = std::move(peer);
  // Its first bytes may have come with the connection (no new edge then).
  if (!Settle(p, p.accepted)) pending_.Add(std::move(p));
}

bool Acceptor::GiveWay() {
  std::optional<PendingConnections::Entry> victim = pending_.TakeVictim();
  if (!victim) return false;
  Forget(victim->fd);
  close(victim->fd);
  stalled_closed_.fetch_add(1);
  return true;
}

bool Acceptor::Settle(PendingConnections::Entry& p, absl::Time now) {
  static thread_local std::vector<uint8_t> buf(kPeekBytes);
  const ssize_t n = recv(p.fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  FirstBytes state = FirstBytes::kIncomplete;
  if (n > 0) {
    const auto bytes = absl::MakeConstSpan(buf.data(), n);
    state = gate_.tls == nullptr ? ClassifyFirstBytes(bytes, kPeekBytes)
                            : ClassifyFirstTlsBytes(bytes);
  }
  if (state == FirstBytes::kAwaitingRequest && gate_.tls == nullptr && !p.greeted) {
    // The server's preface, so that the client sends its first request.
    p.greeted = true;
    // Nine bytes into a new socket's empty send buffer: only a connection
    // already reset fails.
    closed = send(p.fd, kServerPreface, sizeof(kServerPreface), MSG_NOSIGNAL | MSG_DONTWAIT) !=
             static_cast<ssize_t>(sizeof(kServerPreface));
  }
  if (state == FirstBytes::kRequest || state == FirstBytes::kNotHttp2) {
    Forget(p.fd);
    if (state == FirstBytes::kRequest) {
      Relay(p.fd, std::move(p.peer), std::move(p.source));
    } else if (gate_.tls == nullptr) {
      HandOver(p.fd);  // gRPC answers what is not HTTP/2 and closes it
    } else {
      close(p.fd);  // no TLS record on a TLS port: gRPC serves plaintext
      refused_.fetch_add(1);
    }
    return true;
  }
  const bool stalled = state == FirstBytes::kOversized ||
                       now - p.accepted >= gate_.first_request_timeout;
  if (closed || stalled) {
    Forget(p.fd);
    close(p.fd);
    if (stalled) stalled_closed_.fetch_add(1);
    return true;
  }
  return false;
}

void Acceptor::ServicePending(const std::vector<uint64_t>& ready, absl::Time now) {
  pending_.Filter([&](PendingConnections::Entry& p) {
    // Those with new bytes, and those past the timeout.
    if (std::binary_search(ready.begin(), ready.end(), p.tag) ||
        now - p.accepted >= gate_.first_request_timeout) {
      return !Settle(p, now);
    }
    return true;
  });
}

void Acceptor::Loop() {
  std::vector<epoll_event> events(256);
  std::vector<uint64_t> ready;
  absl::Time last_stall_log = absl::InfinitePast();
  int64_t stalled_logged = 0;
  while (!stop_.load()) {
    const int timeout_ms = pending_.size() == 0 ? 100 : 50;
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             timeout_ms);
    if (n < 0 && errno != EINTR) absl::SleepFor(absl::Milliseconds(10));
    bool listener_ready = false;
    ready.clear();
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        listener_ready = true;
      } else {
        ready.push_back(events[i].data.u64);
      }
    }
    std::sort(ready.begin(), ready.end());
    const absl::Time now = absl::Now();
    if (pending_.size() > 0) ServicePending(ready, now);
    if (const int64_t closed = stalled_closed_.load();
        closed > stalled_logged && now - last_stall_log > absl::Seconds(10)) {
      last_stall_log = now;
      stalled_logged = closed;
      ServerLog().warn(
          "closed {} connections so far that sent no complete first request within {} "
          "(or gave way to newer ones, {} waiting at most)",
          closed, absl::FormatDuration(gate_.first_request_timeout), gate_.max_pending);
    }
    if (!listener_ready) continue;
    // Take waiting connections, a batch at a time: between batches the
    // pending ones' first bytes are looked at (the listener, level
    // triggered, wakes the next wait at once while more are waiting).
    for (int taken = 0; taken < kAcceptBatch && !stop_.load(); ++taken) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Take(fd, SourceKey(peer, peer_len), PeerUri(peer, peer_len));
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      const bool no_descriptor =
          errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
      // A connection that has not sent a request yet gives way to the new one.
      if (no_descriptor && GiveWay()) continue;
      const int pause_ms = PauseMsAfter(errno);
      absl::SleepFor(absl::Milliseconds(pause_ms));
      break;
    }
  }
}

int Acceptor::PauseMsAfter(int err) {
  if (spare_fd_ < 0) spare_fd_ = OpenSpare();
  const bool no_descriptor =
      err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
  if (no_descriptor && spare_fd_ >= 0) {
    // Make room for the waiting connections only to close them: they would
    // otherwise wait in the backlog, and wake every poll, until descriptors
    // are free.
    close(spare_fd_);
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
      close(fd);
      refused_.fetch_add(1);
    }
    spare_fd_ = OpenSpare();
  }
  const absl::Time now = absl::Now();
  if (now - last_log_ > absl::Seconds(10)) {
    last_log_ = now;
    ServerLog().warn(
        "accepting connections failed: {}; {} connections refused at the open-file "
        "limit so far (refitd keeps accepting once descriptors are free)",
        std::strerror(err), refused_.load());
  }
  // With the spare, every waiting connection was refused at once; without
  // it (another thread took the descriptor), wait longer for one to free.
  return no_descriptor && spare_fd_ >= 0 ? 10 : 100;
}

}  // namespace refit
