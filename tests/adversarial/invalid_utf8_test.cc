// Request text that is not UTF-8, against a refitd child process: no caller,
// with a wrong token or the right one, makes refitd log a line per call, and
// an authenticated caller is answered INVALID_ARGUMENT naming the field.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "proto/refit_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// Calls KvSet with a key and member id that are not UTF-8, bearing `token`.
// (Before they were bytes on the wire, the client library logged, but sent
// them all the same, as any other client can.)
grpc::Status CallKvSet(v1::RefitService::Stub& stub, const std::string& token) {
  v1::KvSetRequest req;
  req.set_key("k\xff\xfe\xc0");
  req.set_member_id("m\xc0\xaf");
  v1::KvSetResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("authorization", "Bearer " + token);
  return stub.KvSet(&ctx, req, &resp);
}

int64_t LineCount(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, int64_t{64} << 20);
  if (!text.ok()) return -1;
  return static_cast<int64_t>(std::count(text->begin(), text->end(), '\n'));
}

TEST(InvalidUtf8Test, NoLogLinePerCallAndTheFieldIsNamed) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string token_file = absl::StrCat(dir, "/token");
  std::ofstream(token_file) << "the-token\n";
  const std::string log = absl::StrCat(dir, "/refitd.out");
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"),
                         {absl::StrCat("--token_file=", token_file)}, log, absl::Seconds(20))
                  .ok());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", refitd.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::RefitService::NewStub(channel);
  // One call first, so that start-up lines are in the log before counting.
  EXPECT_EQ(CallKvSet(*stub, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  absl::SleepFor(absl::Milliseconds(200));
  const int64_t before = LineCount(log);
  for (int i = 0; i < 1000; ++i) {
    grpc::Status s = CallKvSet(*stub, "wrong");
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  absl::SleepFor(absl::Milliseconds(200));
  const int64_t after = LineCount(log);
  // A few lines at most (none is per call): e.g. one rate-limited summary.
  EXPECT_LE(after - before, 5) << "refitd logged " << (after - before)
                               << " lines for 1000 refused calls";

  // With the token (or with none configured, refitd's default): each call
  // is answered INVALID_ARGUMENT naming the field, and none is logged.
  for (int i = 0; i < 1000; ++i) {
    grpc::Status s = CallKvSet(*stub, "the-token");
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    ASSERT_THAT(s.error_message(), HasSubstr("key: not UTF-8"));
  }
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_LE(LineCount(log) - after, 5) << "refitd logged " << (LineCount(log) - after)
                                       << " lines for 1000 malformed calls";
  EXPECT_TRUE(refitd.Alive());
  absl::StatusOr<std::string> text = ReadFileToString(log, 1 << 20);
  if (HasFailure() && text.ok()) std::fprintf(stderr, "refitd log:\n%s\n", text->c_str());
}

}  // namespace
}  // namespace refit
