#include "server/metrics_http.h"

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "civetweb.h"

namespace refit {

int MetricsHttpServer::Handle(::mg_connection* conn, void* self) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || std::strcmp(info->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "only GET");
    return 405;
  }
  const std::string page = static_cast<MetricsHttpServer*>(self)->options_.render();
  mg_send_http_ok(conn, "text/plain; version=0.0.4; charset=utf-8",
                  static_cast<long long>(page.size()));
  mg_write(conn, page.data(), page.size());
  return 200;
}

int MetricsHttpServer::HandleHealth(::mg_connection* conn, void* self) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || std::strcmp(info->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "only GET");
    return 405;
  }
  const Options& o = static_cast<MetricsHttpServer*>(self)->options_;
  const bool serving = !o.serving || o.serving();
  const std::string page = serving ? "ok\n" : "not serving\n";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %d\r\nConnection: close\r\n\r\n",
            serving ? 200 : 503, serving ? "OK" : "Service Unavailable",
            static_cast<int>(page.size()));
  mg_write(conn, page.data(), page.size());
  return serving ? 200 : 503;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    Options options) {
  if (!options.render) return absl::InvalidArgumentError("options.render: not set");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.port: must be 0..65535: ", options.port));
  }
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(std::move(options)));
  const std::string ports = absl::StrCat(s->options_.host, ":", s->options_.port);
  const char* config[] = {"listening_ports", ports.c_str(), "num_threads", "2",
                          "request_timeout_ms", "10000", nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  s->ctx_ = mg_start(&callbacks, nullptr, config);
  if (s->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", ports));
  }
  mg_set_request_handler(s->ctx_, "/metrics$", &MetricsHttpServer::Handle, s.get());
  mg_set_request_handler(s->ctx_, "/healthz$", &MetricsHttpServer::HandleHealth, s.get());
  mg_server_port bound[1];
  if (mg_get_server_ports(s->ctx_, 1, bound) < 1 || bound[0].port == 0) {
    return absl::UnavailableError(absl::StrCat("metrics: no port bound on ", ports));
  }
  s->port_ = bound[0].port;
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace refit
