// Requests whose bytes are not a protobuf message of the method's request
// type. gRPC's generated callback handlers answer those UNIMPLEMENTED with
// an empty message; refitd's service installs the handlers below instead,
// which hand it an empty request marked malformed, so that it answers
// INVALID_ARGUMENT naming the method (MalformedRequestStatus), after the
// bearer token was checked like for any call. A unary handler may also be
// given a size check: a request it refuses is not parsed at all (a peer's
// 50 MB of repeated fields cost refitd no parse), and the service gets an
// empty request marked with the refusal.
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

// Clears `request` and marks it as a request refused unparsed, for
// `reason`.
void MarkRefused(google::protobuf::Message* request, absl::string_view reason);

// OK for a request that parsed; INVALID_ARGUMENT "<method>: the request is
// not a valid <type> (malformed protobuf)" for one MarkMalformed marked;
// INVALID_ARGUMENT with the reason for one MarkRefused marked.
absl::Status MalformedRequestStatus(const google::protobuf::Message& request);

// Returns OK when a request of `bytes` serialized bytes may be parsed, else
// why it is refused unparsed (the caller is answered INVALID_ARGUMENT with
// its message).
using RequestSizeCheck = std::function<absl::Status(size_t bytes)>;

// A unary callback handler that passes a request that does not parse to the
// service as an empty request marked malformed (see the file comment).
template <typename Request, typename Response>
class TolerantUnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using Getter = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*,
                                                         const Request*, Response*)>;
  // `size_check`, when set, sees each request's size before it is parsed.
  TolerantUnaryHandler(std::string method, Getter get, RequestSizeCheck size_check = nullptr)
      : method_(std::move(method)),
        size_check_(std::move(size_check)),
        inner_(std::move(get)) {}

  void RunHandler(const HandlerParameter& param) override { inner_.RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    absl::Status size = absl::OkStatus();
    if (req != nullptr && size_check_ != nullptr) {
      size = size_check_(grpc::g_core_codegen_interface->grpc_byte_buffer_length(req));
    }
    if (!size.ok()) {
      // Not parsed: the inner handler, given no bytes, fails after it set
      // the holder of the call's messages.
      grpc::g_core_codegen_interface->grpc_byte_buffer_destroy(req);
      req = nullptr;
    }
    void* request = inner_.Deserialize(call, req, status, handler_data);
    if (status->ok()) return request;
    // The holder of the call's messages is set before parsing.
    auto* holder = static_cast<grpc::MessageHolder<Request, Response>*>(*handler_data);
    if (size.ok()) {
      MarkMalformed(holder->request(), method_);
    } else {
      MarkRefused(holder->request(), size.message());
    }
    *status = grpc::Status::OK;
    return holder->request();
  }

 private:
  const std::string method_;
  const RequestSizeCheck size_check_;
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
