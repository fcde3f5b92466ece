// Requests whose bytes are not a protobuf message of the method's request
// type. gRPC's generated callback handlers answer those UNIMPLEMENTED with
// an empty message; refitd's service installs the handlers below instead,
// which hand it an empty request marked malformed, so that it answers
// INVALID_ARGUMENT naming the method (MalformedRequestStatus), after the
// bearer token was checked like for any call.
#ifndef REFIT_SERVER_MALFORMED_REQUEST_H_
#define REFIT_SERVER_MALFORMED_REQUEST_H_

#include <functional>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"

namespace refit {

// Clears `request` and marks it as the malformed request of `method`.
void MarkMalformed(google::protobuf::Message* request, absl::string_view method);

// OK for a request that parsed; INVALID_ARGUMENT "<method>: the request is
// not a valid <type> (malformed protobuf)" for one MarkMalformed marked.
absl::Status MalformedRequestStatus(const google::protobuf::Message& request);

// A unary callback handler that passes a request that does not parse to the
// service as an empty request marked malformed (see the file comment).
template <typename Request, typename Response>
class TolerantUnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using Getter = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*,
                                                         const Request*, Response*)>;
  TolerantUnaryHandler(std::string method, Getter get)
      : method_(std::move(method)), inner_(std::move(get)) {}

  void RunHandler(const HandlerParameter& param) override { inner_.RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    void* request = inner_.Deserialize(call, req, status, handler_data);
    if (status->ok()) return request;
    // The holder of the call's messages is set before parsing.
    auto* holder = static_cast<grpc::MessageHolder<Request, Response>*>(*handler_data);
    MarkMalformed(holder->request(), method_);
    *status = grpc::Status::OK;
    return holder->request();
  }

 private:
  const std::string method_;
  grpc::internal::CallbackUnaryHandler<Request, Response> inner_;
};

// The same for a server-streaming callback handler.
template <typename Request, typename Response>
class TolerantServerStreamingHandler final : public grpc::internal::MethodHandler {
 public:
  using Getter = std::function<grpc::ServerWriteReactor<Response>*(
      grpc::CallbackServerContext*, const Request*)>;
  TolerantServerStreamingHandler(std::string method, Getter get)
      : method_(std::move(method)), inner_(std::move(get)) {}

  void RunHandler(const HandlerParameter& param) override { inner_.RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    void* request = inner_.Deserialize(call, req, status, handler_data);
    if (status->ok()) return request;
    // The inner handler destroyed its request: one of ours in the call's
    // arena, destroyed by the stream like its own.
    auto* marked = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(
        call, sizeof(Request))) Request();
    MarkMalformed(marked, method_);
    *status = grpc::Status::OK;
    return marked;
  }

 private:
  const std::string method_;
  grpc::internal::CallbackServerStreamingHandler<Request, Response> inner_;
};

}  // namespace refit

#endif  // REFIT_SERVER_MALFORMED_REQUEST_H_
