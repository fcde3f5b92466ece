// Test helpers for adversarial tests that talk to a refitd child: a client
// connected or a member joined over RefitClient, a call on a new
// connection, and a crowd of KvGet(wait) calls parked on one channel (one
// caller address) for a member. Test-only.
#ifndef REFIT_TESTS_ADVERSARIAL_REFITD_PEERS_H_
#define REFIT_TESTS_ADVERSARIAL_REFITD_PEERS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/refit_client.h"
#include "proto/refit_service.grpc.pb.h"

namespace refit::testing {

// Returns a client of the refitd on 127.0.0.1:`port`, not registered (a
// gtest failure and null when it could not).
std::unique_ptr<RefitClient> ConnectRefitd(int port);

// Returns a client of the refitd on 127.0.0.1:`port` that registered `reg`
// (a gtest failure and null when it could not).
std::unique_ptr<RefitClient> JoinRefitd(int port, const v1::Registration& reg);

// Calls GetStatus over a connection of its own (channels of one process
// share connections unless told not to), waiting for it to connect, bounded
// by `deadline`; returns the call's status. With `tls_ca_pem`, over TLS
// checking refitd's certificate against it under the name `tls_name`.
grpc::Status StatusOverANewConnection(int port, absl::Time deadline,
                                      const std::string& tls_ca_pem = "",
                                      const std::string& tls_name = "");

// Calls GetStatus over a connection of its own made with `creds` (TLS:
// refitd's certificate checked under the name `tls_name`, empty for
// plaintext), with "authorization: Bearer <bearer_token>" unless it is
// empty; waits for the connection until `deadline` when `wait_for_ready`,
// else fails as soon as it cannot connect. Returns the call's status.
grpc::Status StatusWith(int port, absl::Time deadline,
                        std::shared_ptr<grpc::ChannelCredentials> creds,
                        const std::string& tls_name, const std::string& bearer_token,
                        bool wait_for_ready);

// `count` KvGet(wait) calls for keys "never/<i>" as member `member`, parked
// on one new channel to 127.0.0.1:`port` (a connection made from `source`,
// a loopback address such as "127.0.0.2", when not empty), each with a
// deadline `wait` away. The destructor cancels those still parked and
// waits (at most 10 s each) for their answers.
class ParkedKvGets {
 public:
  ParkedKvGets(int port, const RefitClient& member, int count, absl::Duration wait,
               const std::string& source = "");
  ~ParkedKvGets();

  // Waits until `n` calls were answered or `deadline`; returns how many of
  // those answered were RESOURCE_EXHAUSTED (`other`: the rest).
  int AwaitRefused(int n, absl::Time deadline, int* other);

 private:
  struct Call {
    grpc::ClientContext ctx;
    v1::KvGetResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::KvGetResponse>> reader;
  };
  std::unique_ptr<v1::RefitService::Stub> service_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
  int answered_ = 0;
};

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_REFITD_PEERS_H_
