// A small HTTP listener (civetweb) that serves GET /metrics, in Prometheus
// text exposition format, and GET /healthz (200 "ok" while serving, 503
// "not serving" otherwise); refitd's --metrics_port.
#ifndef REFIT_SERVER_METRICS_HTTP_H_
#define REFIT_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace refit {

class MetricsHttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 picks one
    // Returns the page; called on a civetweb worker thread for each scrape.
    std::function<std::string()> render;
    // Returns whether /healthz says ok; unset: always.
    std::function<bool()> serving;
  };

  // Starts listening. Fails with INVALID_ARGUMENT when `render` is not set
  // or the port is outside 0..65535, UNAVAILABLE when the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(Options options);

  // Stops listening (waits for scrapes in progress).
  ~MetricsHttpServer();

  // Returns the bound port (never 0).
  int port() const { return port_; }

 private:
  explicit MetricsHttpServer(Options options) : options_(std::move(options)) {}
  static int Handle(::mg_connection* conn, void* self);
  static int HandleHealth(::mg_connection* conn, void* self);

  const Options options_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace refit

#endif  // REFIT_SERVER_METRICS_HTTP_H_
