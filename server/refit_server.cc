// refitd's gRPC service on the callback API: each RPC is one Coordinator
// call, answered at once or, for waits (AwaitPlan, KvGet with wait), by a
// parked reactor that the coordinator finishes when the condition holds.
// Handlers never block. Connections come from refitd's own listener
// (acceptor.h), which keeps accepting at the open-file limit. The bearer
// token is checked by the listener's credentials before any handler runs; each handler then checks that the
// request's text is UTF-8 (request_text.h) before the coordinator sees it.
#include "server/refit_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/refit_service.grpc.pb.h"
#include "server/acceptor.h"
#include "server/coordinator.h"
#include "server/log.h"
#include "server/malformed_request.h"
#include "server/request_text.h"
#include "server/round_stream_reactor.h"
#include "server/tls_server_context.h"

namespace refit {
namespace {

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  size_t colon = address.rfind(':');
  if (colon != std::string::npos) host = address.substr(0, colon);
  if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// The address of a peer ("ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1"): one
// caller, whichever port it connects from.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos || colon < 5 ? peer : peer.substr(0, colon);
}

// A unary call parked in the coordinator; a cancel ends the wait.
class WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit WaitReactor(Coordinator* coordinator) : coordinator_(coordinator) {}
  // Set before the reactor is returned to gRPC (so before any OnCancel).
  void set_wait(Coordinator::WaitId id) { wait_ = id; }
  void OnCancel() override { coordinator_->CancelWait(wait_); }
  void OnDone() override { delete this; }

 private:
  Coordinator* const coordinator_;
  Coordinator::WaitId wait_ = 0;
};

}  // namespace

class RefitServer::Impl final : public v1::RefitService::CallbackService {
 public:
  explicit Impl(Options options) : options_(std::move(options)) { InstallHandlers(); }

  // Starts the coordinator and the listener; see RefitServer::Start.
  absl::Status Init();
  // See RefitServer::Shutdown.
  void Shutdown();
  int port() const { return port_; }
  bool serving() const { return !shut_down_; }
  std::string MetricsText() const {
    return coordinator_->metrics().Exposition(coordinator_->MetricsState());
  }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    if (!req->refusal().empty()) {
      return Reply(ctx, coordinator_->Refuse(req->registration(), req->refusal(),
                                             req->member_secret(), req->job_key()), resp);
    }
    return Reply(ctx, coordinator_->Register(req->registration(), req->member_secret(),
                                                 req->job_key()), resp);
  }
  grpc::ServerUnaryReactor* AwaitPlan(grpc::CallbackServerContext* ctx,
                                      const v1::AwaitPlanRequest* req,
                                      v1::AwaitPlanResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    auto* r = new WaitReactor(coordinator_.get());
    r->set_wait(coordinator_->AwaitPlan(
        *req, WaitDeadline(ctx), [r, resp](absl::StatusOr<v1::AwaitPlanResponse> got) {
          if (got.ok()) *resp = std::move(*got);
          r->Finish(ToGrpcStatus(got.status()));
        }));
    return r;
  }
  grpc::ServerUnaryReactor* StartRound(grpc::CallbackServerContext* ctx,
                                       const v1::StartRoundRequest* req,
                                       v1::StartRoundResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    return Reply(ctx, coordinator_->StartRound(*req), resp);
  }
  grpc::ServerWriteReactor<v1::RoundEvent>* WatchRounds(
      grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) override {
    auto* stream = new RoundStreamReactor(coordinator_.get(), req->member_id());
    absl::Status s = CheckRequest(*req);
    if (s.ok()) s = coordinator_->Watch(req->member_id(), req->member_secret(), stream);
    if (!s.ok()) stream->End(s);
    return stream;
  }
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    return Finish(ctx, coordinator_->Report(*req));
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    return Reply(ctx, coordinator_->Heartbeat(*req), resp);
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const v1::LeaveRequest* req,
                                  v1::LeaveResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    return Finish(ctx, coordinator_->Leave(*req));
  }
  grpc::ServerUnaryReactor* GetEngineState(grpc::CallbackServerContext* ctx,
                                           const v1::EngineStateRequest* req,
                                           v1::EngineStateResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    *resp = coordinator_->GetEngineState(*req);
    return Finish(ctx, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* ctx,
                                  const v1::KvSetRequest* req,
                                  v1::KvSetResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    return Finish(ctx, coordinator_->KvSet(*req));
  }
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx,
                                  const v1::KvGetRequest* req,
                                  v1::KvGetResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    auto* r = new WaitReactor(coordinator_.get());
    r->set_wait(coordinator_->KvGet(
        *req, WaitDeadline(ctx), [r, resp](absl::StatusOr<std::string> got) {
          if (got.ok()) resp->set_value(std::move(*got));
          r->Finish(ToGrpcStatus(got.status()));
        },
        PeerHost(acceptor_->RealPeer(ctx->peer()))));
    return r;
  }
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::StatusRequest* req,
                                      v1::StatusResponse* resp) override {
    if (auto* r = RefuseNonText(ctx, *req)) return r;
    *resp = coordinator_->GetStatus();
    return Finish(ctx, absl::OkStatus());
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                          const absl::Status& s) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(ToGrpcStatus(s));
    return r;
  }
  // Replaces the generated handlers by ones that pass a request that does
  // not parse on, marked (malformed_request.h), so that CheckRequest names
  // the method. The indices are the methods' order in refit_service.proto.
  void InstallHandlers() {
    auto unary = [this](int index, const char* method, auto member,
                        RequestSizeCheck size_check = nullptr) {
      using Handler = decltype(UnaryHandlerFor(member));
      MarkMethodCallback(index, new Handler(
                                    method,
                                    [this, member](auto* ctx, auto* req, auto* resp) {
                                      return (this->*member)(ctx, req, resp);
                                    },
                                    std::move(size_check)));
    };
    unary(0, "Register", &Impl::Register);
    unary(1, "AwaitPlan", &Impl::AwaitPlan);
    unary(2, "StartRound", &Impl::StartRound);
    MarkMethodCallback(
        3, new TolerantServerStreamingHandler<v1::WatchRequest, v1::RoundEvent>(
               "WatchRounds",
               [this](grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) {
                 return WatchRounds(ctx, req);
               }));
    // A report larger than the current plan lets is not parsed.
    unary(4, "Report", &Impl::Report,
          [this](size_t bytes) { return coordinator_->CheckReportSize(bytes); });
    unary(5, "Heartbeat", &Impl::Heartbeat);
    unary(6, "Leave", &Impl::Leave);
    unary(7, "GetEngineState", &Impl::GetEngineState);
    unary(8, "KvSet", &Impl::KvSet);
    unary(9, "KvGet", &Impl::KvGet);
    unary(10, "GetStatus", &Impl::GetStatus);
  }
  template <typename Request, typename Response>
  static TolerantUnaryHandler<Request, Response> UnaryHandlerFor(
      grpc::ServerUnaryReactor* (Impl::*)(grpc::CallbackServerContext*, const Request*,
                                          Response*));

  // OK, or INVALID_ARGUMENT naming the method for a request that did not
  // parse, or naming the field for text that is not UTF-8.
  static absl::Status CheckRequest(const google::protobuf::Message& req) {
    absl::Status s = MalformedRequestStatus(req);
    return s.ok() ? CheckRequestText(req) : s;
  }
  // Returns the call finished with CheckRequest's error; null when the
  // request is well-formed.
  static grpc::ServerUnaryReactor* RefuseNonText(grpc::CallbackServerContext* ctx,
                                                 const google::protobuf::Message& req) {
    absl::Status s = CheckRequest(req);
    return s.ok() ? nullptr : Finish(ctx, s);
  }
  template <typename Response>
  static grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                         absl::StatusOr<Response> got, Response* resp) {
    if (got.ok()) *resp = std::move(*got);
    return Finish(ctx, got.status());
  }
  // The earlier of the call's deadline and options.max_wait from now.
  absl::Time WaitDeadline(grpc::CallbackServerContext* ctx) const {
    return std::min(absl::Now() + options_.max_wait, absl::FromChrono(ctx->deadline()));
  }

  const Options options_;
  std::atomic<bool> shut_down_{false};
  // Declared before server_: destroyed after it, as reactors call into it.
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<TlsServerContext> tls_context_;  // null: plaintext
  std::unique_ptr<Acceptor> acceptor_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> connections_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

absl::Status RefitServer::Impl::Init() {
  REFIT_ASSIGN_OR_RETURN(coordinator_, Coordinator::Create(options_.coordinator));
  if (options_.tls == nullptr && !IsLoopbackAddress(options_.address) &&
      !options_.allow_insecure_non_loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.address: insecure listener on non-loopback address ",
        options_.address, " needs TLS or allow_insecure_non_loopback"));
  }
  // TLS ends in the acceptor's relay (tls_server_context.h); gRPC serves
  // the decrypted bytes and checks the token.
  if (options_.tls != nullptr) {
    REFIT_ASSIGN_OR_RETURN(tls_context_, TlsServerContext::Create(*options_.tls));
  }
  REFIT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                         MakeServerCredentials(/*tls=*/nullptr, options_.bearer_token,
                                               [c = coordinator_.get()] {
                                                 c->metrics().AuthFailed();
                                               }));
  REFIT_ASSIGN_OR_RETURN(acceptor_, Acceptor::Listen(options_.address));
  port_ = acceptor_->port();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  connections_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
  builder.RegisterService(this);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(options_.coordinator.max_metadata_bytes + (1 << 20), INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  // No compressed requests: gRPC checks the size limit before inflating a
  // message, so a 1 MiB gzip of 1 GiB would be inflated whole. A call
  // naming a disabled algorithm is refused when its headers arrive.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  // A connection with no call in flight for first_request_timeout is
  // closed (GOAWAY): one that sent the HTTP/2 preface and SETTINGS and
  // then nothing is never held. Clients reconnect on their next call;
  // members, with a round stream open and a heartbeat a second, never idle.
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(options_.first_request_timeout), INT32_MAX)));
  // Members ping every second (RefitClient::Options::keepalive_interval) to
  // learn within seconds that refitd froze: answer them, however often,
  // instead of closing the connection for "too many pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 200);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.address));
  }
  Acceptor::Gate gate;
  gate.tls = tls_context_.get();
  gate.max_pending = options_.max_pending_connections;
  gate.first_request_timeout = options_.first_request_timeout;
  acceptor_->Start(connections_.get(), gate);
  if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(true);
  ServerLog().info("serving on {} (port {}, {}{})", options_.address, port_,
                   options_.tls == nullptr ? "plaintext"
                   : options_.tls->client_ca_pem.empty() ? "TLS"
                                                         : "mutual TLS",
                   options_.bearer_token.empty() ? "" : ", bearer token required");
  return absl::OkStatus();
}

void RefitServer::Impl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (server_ != nullptr) {
    ServerLog().info("shutting down port={}", port_);
    // Health checks see NOT_SERVING while refitd drains.
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
    absl::SleepFor(options_.drain);
  }
  if (coordinator_ != nullptr) coordinator_->Stop();
  if (acceptor_ != nullptr) acceptor_->Stop();  // no new connections
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
}

absl::StatusOr<std::unique_ptr<RefitServer>> RefitServer::Start(Options options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  REFIT_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<RefitServer>(new RefitServer(std::move(impl)));
}

RefitServer::RefitServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RefitServer::~RefitServer() { Shutdown(); }
int RefitServer::port() const { return impl_->port(); }
bool RefitServer::serving() const { return impl_->serving(); }
std::string RefitServer::MetricsText() const { return impl_->MetricsText(); }
void RefitServer::Shutdown() { impl_->Shutdown(); }

}  // namespace refit
