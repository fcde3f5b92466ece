// Acceptor (see acceptor.h).
#include "server/acceptor.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/log.h"

namespace refit {
namespace {

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// Binds and listens on one resolved address; returns the socket or -1
// (errno set).
int ListenOn(const addrinfo& ai) {
  int fd = socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai.ai_protocol);
  if (fd < 0) return -1;
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (ai.ai_family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // dual stack
  }
  if (bind(fd, ai.ai_addr, ai.ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Listen(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address ", address, ": not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                           &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("address ", address, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  int err = 0;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ListenOn(*ai);
    if (fd < 0) err = errno;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", std::strerror(err)));
  }
  return std::unique_ptr<Acceptor>(new Acceptor(fd, BoundPort(fd)));
}

Acceptor::Acceptor(int listen_fd, int port)
    : listen_fd_(listen_fd), port_(port), spare_fd_(OpenSpare()) {}

Acceptor::~Acceptor() { Stop(); }

void Acceptor::Start(grpc::experimental::ExternalConnectionAcceptor* target) {
  target_ = target;
  thread_ = std::thread([this] { Loop(); });
}

void Acceptor::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void Acceptor::Loop() {
  const int one = 1;
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, /*timeout_ms=*/100) <= 0) continue;
    // Take every waiting connection, then poll again.
    while (!stop_.load()) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
        params.listener_fd = listen_fd_;
        params.fd = fd;
        target_->HandleNewConnection(&params);  // owns fd from here
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
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
