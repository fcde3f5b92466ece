// A small HTTP/1.1 listener for refitd's --metrics_port: GET /metrics (the
// Prometheus text exposition format) and GET /healthz (200 "ok" while
// serving, 503 "not serving" otherwise).
//
// One thread polls every connection: no client can hold a worker. A
// connection must send its whole request head within request_timeout and
// take the page within response_timeout, or it is closed; at most
// max_connections are open (a new one closes the oldest). Each answer
// closes its connection. So slow or idle clients cannot keep a scrape out.
#ifndef REFIT_SERVER_METRICS_HTTP_H_
#define REFIT_SERVER_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit {

class MetricsHttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 picks one
    // Returns the page; called on the server's thread for each scrape.
    std::function<std::string()> render;
    // Returns whether /healthz says ok; unset: always.
    std::function<bool()> serving;
    int max_connections = 64;
    absl::Duration request_timeout = absl::Seconds(5);
    absl::Duration response_timeout = absl::Seconds(10);
  };

  // Starts listening. Fails with INVALID_ARGUMENT when `render` is not set,
  // the port is outside 0..65535 or a limit is not positive, UNAVAILABLE
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(Options options);

  // Stops listening and closes every connection (within ~100 ms).
  ~MetricsHttpServer();

  // Returns the bound port (never 0).
  int port() const { return port_; }

 private:
  struct Connection;
  explicit MetricsHttpServer(Options options) : options_(std::move(options)) {}
  void Loop();

  const Options options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace refit

#endif  // REFIT_SERVER_METRICS_HTTP_H_
