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
#include "absl/synchronization/notification.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// A KvSetRequest on the wire whose key (field 1) and member_id (field 3)
// are the bytes `text`: what any client, with or without the project's
// stubs, can send.
std::string KvSetWithText(const std::string& text) {
  std::string out;
  for (char tag : {'\x0a', '\x1a'}) {
    out.push_back(tag);
    out.push_back(static_cast<char>(text.size()));  // < 128
    out += text;
  }
  return out;
}

// Calls KvSet with `request` and bearer `token`; returns the status.
grpc::Status CallKvSet(grpc::GenericStub& stub, const std::string& request,
                       const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ByteBuffer recv;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/refit.v1.RefitService/KvSet", grpc::StubOptions(), &send, &recv,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
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
  grpc::GenericStub stub(channel);
  const std::string bad = KvSetWithText("k\xff\xfe\xc0");
  // One call first, so that start-up lines are in the log before counting.
  EXPECT_EQ(CallKvSet(stub, bad, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  absl::SleepFor(absl::Milliseconds(200));
  const int64_t before = LineCount(log);
  for (int i = 0; i < 1000; ++i) {
    grpc::Status s = CallKvSet(stub, bad, "wrong");
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
    grpc::Status s = CallKvSet(stub, bad, "the-token");
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
