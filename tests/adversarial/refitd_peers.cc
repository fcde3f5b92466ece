// ConnectRefitd, JoinRefitd, StatusOverANewConnection, StatusWith and
// ParkedKvGets (see refitd_peers.h).
#include "tests/adversarial/refitd_peers.h"

#include <grpcpp/create_channel_posix.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/adversarial/h2_wire.h"

namespace refit::testing {

std::unique_ptr<RefitClient> ConnectRefitd(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<RefitClient> JoinRefitd(int port, const v1::Registration& reg) {
  std::unique_ptr<RefitClient> c = ConnectRefitd(port);
  if (c == nullptr) return nullptr;
  absl::StatusOr<std::string> id = c->Register(reg);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? std::move(c) : nullptr;
}

grpc::Status StatusOverANewConnection(int port, absl::Time deadline,
                                      const std::string& tls_ca_pem,
                                      const std::string& tls_name) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls_ca_pem;
    creds = grpc::SslCredentials(ssl);
  }
  return StatusWith(port, deadline, creds, tls_ca_pem.empty() ? "" : tls_name, "",
                    /*wait_for_ready=*/true);
}

grpc::Status StatusWith(int port, absl::Time deadline,
                        std::shared_ptr<grpc::ChannelCredentials> creds,
                        const std::string& tls_name, const std::string& bearer_token,
                        bool wait_for_ready) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!tls_name.empty()) args.SetSslTargetNameOverride(tls_name);
  auto service = v1::RefitService::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), std::move(creds), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  ctx.set_wait_for_ready(wait_for_ready);
  if (!bearer_token.empty()) ctx.AddMetadata("authorization", "Bearer " + bearer_token);
  v1::StatusRequest req;
  v1::StatusResponse resp;
  return service->GetStatus(&ctx, req, &resp);
}

ParkedKvGets::ParkedKvGets(int port, const RefitClient& member, int count,
                           absl::Duration wait, const std::string& source) {
  const std::string target = absl::StrCat("127.0.0.1:", port);
  // gRPC picks no source address: the channel then runs on a connection
  // made from `source`.
  const int fd = source.empty() ? -1 : Dial(port, source);
  EXPECT_TRUE(source.empty() || fd >= 0) << "no connection from " << source;
  service_ = v1::RefitService::NewStub(
      fd >= 0 ? grpc::CreateInsecureChannelFromFd(target, fd)
              : grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  for (int i = 0; i < count; ++i) {
    auto call = std::make_unique<Call>();
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait));
    v1::KvGetRequest req;
    req.set_key(absl::StrCat("never/", i));
    req.set_wait(true);
    req.set_member_id(member.member_id());
    req.set_member_secret(member.member_secret());
    call->reader = service_->AsyncKvGet(&call->ctx, req, &cq_);
    call->reader->Finish(&call->resp, &call->status, call.get());
    calls_.push_back(std::move(call));
  }
}

int ParkedKvGets::AwaitRefused(int n, absl::Time deadline, int* other) {
  int refused = 0;
  *other = 0;
  void* tag;
  bool ok;
  while (refused + *other < n &&
         cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) ==
             grpc::CompletionQueue::GOT_EVENT) {
    ++answered_;
    if (static_cast<Call*>(tag)->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    } else {
      ++*other;
    }
  }
  return refused;
}

ParkedKvGets::~ParkedKvGets() {
  for (auto& call : calls_) call->ctx.TryCancel();
  void* tag;
  bool ok;
  for (int left = static_cast<int>(calls_.size()) - answered_; left > 0; --left) {
    if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + absl::Seconds(10))) !=
        grpc::CompletionQueue::GOT_EVENT) {
      break;
    }
  }
  cq_.Shutdown();
  while (cq_.Next(&tag, &ok)) {
  }
}

}  // namespace refit::testing
