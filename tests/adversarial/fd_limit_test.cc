// refitd at its open-file limit: a child refitd with a low RLIMIT_NOFILE,
// more idle TCP connections than the limit, then those closed. Members
// connected before keep being answered while it is at the limit, and a new
// client is answered within seconds once the connections are gone (the
// listener did not stop accepting for good).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "proto/refit_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::refit::testing::StatusOverANewConnection;

constexpr int kFdLimit = 256;

// Opens `n` TCP connections to 127.0.0.1:port that send nothing; returns
// their descriptors (as many as this process could open).
std::vector<int> IdleConnections(int port, int n) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds.push_back(fd);
  }
  return fds;
}

TEST(FdLimitTest, RefitdKeepsAcceptingAfterItsFdLimitWasReached) {
  RefitdProcess refitd;
  const std::string log = absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out");
  ASSERT_TRUE(refitd
                  .Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"), {},
                         log, absl::Seconds(20), kFdLimit)
                  .ok());
  // A member connected before the flood.
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", refitd.port());
  auto before = RefitClient::Connect(o);
  ASSERT_TRUE(before.ok()) << before.status();
  for (int round = 0; round < 2; ++round) {
    std::vector<int> idle = IdleConnections(refitd.port(), kFdLimit + 200);
    ASSERT_GT(idle.size(), static_cast<size_t>(kFdLimit));
    absl::SleepFor(absl::Seconds(1));  // refitd accepts until its limit
    // A connection made before is still answered at the limit.
    auto st = (*before)->GetStatus(absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(st.ok()) << st.status();
    for (int fd : idle) close(fd);
    // Once they are gone, a new client is answered within seconds.
    const absl::Time closed = absl::Now();
    grpc::Status status = StatusOverANewConnection(refitd.port(), closed + absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << "round " << round << ": " << status.error_message();
    EXPECT_LT(absl::Now() - closed, absl::Seconds(5));
    EXPECT_TRUE(refitd.Alive());
  }
  // refitd closed connections to stay within its limit (and said so):
  // idle ones that never sent a request give way to new ones, and any
  // beyond are refused at the open-file limit.
  absl::StatusOr<std::string> text = ReadFileToString(log, 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, ::testing::AnyOf(::testing::HasSubstr("refused at the open-file limit"),
                                      ::testing::HasSubstr("sent no complete first request")))
      << *text;
}

}  // namespace
}  // namespace refit
