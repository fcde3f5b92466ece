// Request bytes that are not a protobuf message, sent to every refitd method
// of a refitd child process: with the bearer token each is answered
// INVALID_ARGUMENT naming the method (gRPC's generated handlers answer
// UNIMPLEMENTED with no message); without it, UNAUTHENTICATED, as any call.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// Calls `method` with `bytes` as the request, bearing `token`.
grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& method,
                     const std::string& bytes, const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, absl::StrCat("/refit.v1.RefitService/", method), grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

TEST(MalformedRequestTest, EveryMethodAnswersInvalidArgumentNamingIt) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string token_file = absl::StrCat(dir, "/token");
  std::ofstream(token_file) << "the-token\n";
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {absl::StrCat("--token_file=", token_file)},
                         absl::StrCat(dir, "/refitd.out"), absl::Seconds(20))
                  .ok());
  grpc::GenericStub stub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", refitd.port()),
                                             grpc::InsecureChannelCredentials()));
  // Field 1, wire type 2 (length-delimited), a length past the end; then a
  // tag of field 0, which no message may have.
  const std::string truncated("\x0a\x7f\x01", 3);
  const std::string field_zero("\x00\x01", 2);
  for (const char* method :
       {"Register", "AwaitPlan", "StartRound", "WatchRounds", "Report", "Heartbeat", "Leave",
        "GetEngineState", "KvSet", "KvGet", "GetStatus"}) {
    for (const std::string& bytes : {truncated, field_zero}) {
      grpc::Status s = CallRaw(stub, method, bytes, "the-token");
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << method << ": " << s.error_code() << " " << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(method, ": the request is not a valid refit.v1.")));
      EXPECT_THAT(s.error_message(), HasSubstr("(malformed protobuf)"));
    }
    grpc::Status s = CallRaw(stub, method, truncated, "wrong");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
  }
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit
