// MetricsHttpServer (see metrics_http.h): one poll loop over the listener
// and the open connections, each reading its request head, then writing its
// answer, then closed.
#include "server/metrics_http.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/listen_socket.h"

namespace refit {

// One client: what it sent (until the blank line ending the request head),
// then the answer being written.
struct MetricsHttpServer::Connection {
  int fd = -1;
  absl::Time deadline;   // to finish the current phase
  std::string request;   // reading: bytes so far
  std::string answer;    // writing: bytes not yet sent
  bool writing = false;
};

namespace {

// A request head larger than this is refused (431).
constexpr size_t kMaxRequestHead = 8192;

std::string Answer(int code, const char* reason, const std::string& type,
                   const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      body);
}

// The answer to a complete request head.
std::string AnswerTo(absl::string_view head, const MetricsHttpServer::Options& o) {
  const absl::string_view line = head.substr(0, head.find("\r\n"));
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
  if (words.size() != 3 || !absl::StartsWith(words[2], "HTTP/1.")) {
    return Answer(400, "Bad Request", "text/plain", "bad request\n");
  }
  absl::string_view path = words[1];
  path = path.substr(0, path.find('?'));
  if (path != "/metrics" && path != "/healthz") {
    return Answer(404, "Not Found", "text/plain", "not found\n");
  }
  if (words[0] != "GET") return Answer(405, "Method Not Allowed", "text/plain", "only GET\n");
  if (path == "/healthz") {
    // 503 once refitd is shutting down (draining): load balancers stop here.
    return !o.serving || o.serving()
               ? Answer(200, "OK", "text/plain; charset=utf-8", "ok\n")
               : Answer(503, "Service Unavailable", "text/plain; charset=utf-8",
                        "not serving\n");
  }
  return Answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", o.render());
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    Options options) {
  if (!options.render) return absl::InvalidArgumentError("options.render: not set");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.port: must be 0..65535: ", options.port));
  }
  if (options.max_connections < 1 || options.request_timeout <= absl::ZeroDuration() ||
      options.response_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "options.max_connections, request_timeout and response_timeout must be positive");
  }
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(std::move(options)));
  const std::string host = s->options_.host.find(':') != std::string::npos
                               ? absl::StrCat("[", s->options_.host, "]")
                               : s->options_.host;
  absl::StatusOr<ListenSocket> sock = ListenTcp(absl::StrCat(host, ":", s->options_.port));
  if (!sock.ok()) {
    return absl::UnavailableError(absl::StrCat("metrics: ", sock.status().message()));
  }
  s->listen_fd_ = sock->fd;
  s->port_ = sock->port;
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsHttpServer::Loop() {
  std::deque<Connection> conns;  // oldest first
  std::vector<pollfd> fds;
  char buf[4096];
  while (!stop_.load()) {
    fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
    for (const Connection& c : conns) {
      fds.push_back(pollfd{c.fd, static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
    }
    if (poll(fds.data(), fds.size(), /*timeout_ms=*/100) < 0 && errno != EINTR) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    const absl::Time now = absl::Now();
    std::deque<Connection> kept;
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short ev = fds[i + 1].revents;
      bool done = now >= c.deadline || (ev & (POLLERR | POLLNVAL)) != 0;
      if (!done && !c.writing && (ev & (POLLIN | POLLHUP)) != 0) {
        const ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          done = true;
        } else if (n > 0) {
          c.request.append(buf, static_cast<size_t>(n));
          const size_t end = c.request.find("\r\n\r\n");
          if (end != std::string::npos) {
            c.answer = AnswerTo(absl::string_view(c.request).substr(0, end), options_);
            c.writing = true;
            c.deadline = now + options_.response_timeout;
          } else if (c.request.size() > kMaxRequestHead) {
            c.answer = Answer(431, "Request Header Fields Too Large", "text/plain", "too large\n");
            c.writing = true;
            c.deadline = now + options_.response_timeout;
          }
        }
      }
      if (!done && c.writing && (ev & POLLOUT) != 0) {
        const ssize_t n = send(c.fd, c.answer.data(), c.answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          done = true;
        } else if (n > 0) {
          c.answer.erase(0, static_cast<size_t>(n));
          done = c.answer.empty();
        }
      }
      if (done) {
        close(c.fd);
      } else {
        kept.push_back(std::move(c));
      }
    }
    conns.swap(kept);
    if ((fds[0].revents & POLLIN) == 0) continue;
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
      if (static_cast<int>(conns.size()) >= options_.max_connections) {
        close(conns.front().fd);  // the oldest gives way
        conns.pop_front();
      }
      Connection c;
      c.fd = fd;
      c.deadline = now + options_.request_timeout;
      conns.push_back(std::move(c));
    }
  }
  for (const Connection& c : conns) close(c.fd);
}

}  // namespace refit
