// Acceptor (see acceptor.h).
#include "server/acceptor.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/listen_socket.h"
#include "server/log.h"

namespace refit {
namespace {

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// How long a connection that sent whole frames and no request must be
// quiet before it is handed over.
constexpr absl::Duration kQuiet = absl::Milliseconds(200);

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
  thread_ = std::thread([this] { Loop(); });
}

void Acceptor::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  for (const Pending& p : pending_) close(p.fd);
  pending_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  close(listen_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
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

void Acceptor::Take(int fd) {
  if (!gate_.plaintext) {
    HandOver(fd);
    return;
  }
  while (static_cast<int>(pending_.size()) >= gate_.max_pending) CloseOldestPending();
  const absl::Time now = absl::Now();
  const uint64_t seq = ++next_seq_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = seq;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    HandOver(fd);  // cannot watch it: let gRPC have it
    return;
  }
  pending_.push_back(Pending{fd, seq, now, now});
}

bool Acceptor::CloseOldestPending() {
  if (pending_.empty()) return false;
  Forget(pending_.front().fd);
  close(pending_.front().fd);
  pending_.pop_front();
  stalled_closed_.fetch_add(1);
  return true;
}

Acceptor::FirstRequest Acceptor::Inspect(Pending& p, absl::Time now) {
  // The HTTP/2 client preface, then frames of a 9-byte header each:
  // length (24 bits), type, flags, stream id.
  static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  constexpr size_t kPrefaceLen = sizeof(kPreface) - 1;
  constexpr size_t kPeekBytes = 64 << 10;
  static thread_local std::vector<unsigned char> buf(kPeekBytes);
  const ssize_t n = recv(p.fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return FirstRequest::kClosed;
  if (n < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? FirstRequest::kIncomplete
                                                                     : FirstRequest::kClosed;
  }
  const size_t got = static_cast<size_t>(n);
  p.whole_frames = false;
  if (got != p.bytes) {
    p.bytes = got;
    p.changed = now;
  }
  // Not HTTP/2 (or more than we look at): gRPC answers or closes it.
  if (std::memcmp(buf.data(), kPreface, std::min(got, kPrefaceLen)) != 0 || got == kPeekBytes) {
    return FirstRequest::kComplete;
  }
  if (got < kPrefaceLen) return FirstRequest::kIncomplete;
  size_t off = kPrefaceLen;
  while (off + 9 <= got) {
    const size_t len = (size_t{buf[off]} << 16) | (size_t{buf[off + 1]} << 8) | buf[off + 2];
    const unsigned char type = buf[off + 3], flags = buf[off + 4];
    if (off + 9 + len > got) return FirstRequest::kIncomplete;  // mid-frame
    constexpr unsigned char kHeaders = 0x1, kContinuation = 0x9, kEndHeaders = 0x4;
    if ((type == kHeaders || type == kContinuation) && (flags & kEndHeaders) != 0) {
      return FirstRequest::kComplete;
    }
    off += 9 + len;
  }
  if (off < got) return FirstRequest::kIncomplete;  // a frame header cut short
  // Whole frames and no request yet: a client waiting for the server's
  // SETTINGS before it sends one. Hand it over once it has been quiet.
  p.whole_frames = true;
  return now - p.changed >= kQuiet ? FirstRequest::kComplete : FirstRequest::kIncomplete;
}

void Acceptor::ServicePending(const std::vector<uint64_t>& ready, absl::Time now) {
  std::deque<Pending> kept;
  for (Pending& p : pending_) {
    FirstRequest state = FirstRequest::kIncomplete;
    // Those with new bytes, and the quiet ones whose whole frames are due.
    if (std::binary_search(ready.begin(), ready.end(), p.seq) ||
        (p.whole_frames && now - p.changed >= kQuiet)) {
      state = Inspect(p, now);
    }
    if (state == FirstRequest::kComplete) {
      Forget(p.fd);
      HandOver(p.fd);
    } else if (state == FirstRequest::kClosed) {
      Forget(p.fd);
      close(p.fd);
    } else if (now - p.accepted >= gate_.first_request_timeout) {
      Forget(p.fd);
      close(p.fd);
      stalled_closed_.fetch_add(1);
    } else {
      kept.push_back(p);
    }
  }
  pending_.swap(kept);
}

void Acceptor::Loop() {
  std::vector<epoll_event> events(256);
  std::vector<uint64_t> ready;
  absl::Time last_stall_log = absl::InfinitePast();
  int64_t stalled_logged = 0;
  while (!stop_.load()) {
    const int timeout_ms = pending_.empty() ? 100 : 50;
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
    if (!pending_.empty()) ServicePending(ready, now);
    if (const int64_t closed = stalled_closed_.load();
        closed > stalled_logged && now - last_stall_log > absl::Seconds(10)) {
      last_stall_log = now;
      stalled_logged = closed;
      ServerLog().warn(
          "closed {} connections so far that sent no complete first request within {} "
          "(or were the oldest of {} waiting)",
          closed, absl::FormatDuration(gate_.first_request_timeout), gate_.max_pending);
    }
    if (!listener_ready) continue;
    // Take every waiting connection, then wait again.
    while (!stop_.load()) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Take(fd);
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      const bool no_descriptor =
          errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
      // A connection that has not sent a request yet gives way to the new one.
      if (no_descriptor && CloseOldestPending()) continue;
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
