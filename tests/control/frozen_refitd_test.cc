// A member notices a frozen refitd (a child refitd stopped with SIGSTOP)
// within about its refitd_timeout, with a reason that says so, instead of
// waiting out its own deadline.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

// A refitd child process on 127.0.0.1:0; killed (and reaped) on destruction.
struct Refitd {
  pid_t pid = -1;
  int port = 0;
  ~Refitd() {
    if (pid > 0) {
      kill(pid, SIGCONT);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Starts refitd and waits (up to 20 s) for its port.
void StartRefitd(Refitd* r) {
  const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out");
  r->pid = fork();
  if (r->pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd");
    std::string addr = "--address=127.0.0.1:0";
    char* argv[] = {bin.data(), addr.data(), nullptr};
    execv(bin.c_str(), argv);
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline && r->port == 0) {
    absl::StatusOr<std::string> text = ReadFileToString(out, 1 << 20);
    const std::string key = "listening on port ";
    size_t at = text.ok() ? text->find(key) : std::string::npos;
    if (at != std::string::npos) {
      size_t end = text->find('\n', at);
      if (end != std::string::npos) {
        int port = 0;
        if (absl::SimpleAtoi(text->substr(at + key.size(), end - at - key.size()), &port)) {
          r->port = port;
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

TEST(FrozenRefitdTest, AMemberNoticesAStoppedRefitdWithinItsTimeout) {
  Refitd refitd;
  StartRefitd(&refitd);
  ASSERT_GT(refitd.port, 0);
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", refitd.port);
  o.heartbeat_interval = absl::Milliseconds(100);
  o.refitd_timeout = absl::Seconds(1);
  auto c = RefitClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::Registration reg;
  reg.set_protocol_version(kProtocolVersion);
  auto* id = reg.mutable_identity();
  id->set_job("job");
  id->set_side(v1::SIDE_TRAINER);
  id->set_world_size(1);
  id->set_host_id("h");
  reg.set_model_config("tiny-qwen3");
  reg.set_convention("megatron:tp=1");
  ASSERT_TRUE((*c)->Register(reg).ok());

  ASSERT_EQ(kill(refitd.pid, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  absl::StatusOr<int64_t> round = (*c)->WaitForRound(stopped + absl::Seconds(30));
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_EQ(round.status().code(), absl::StatusCode::kUnavailable) << round.status();
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr(absl::StrCat("refitd at ", o.target, " did not answer heartbeats")));
  EXPECT_LT(took, absl::Seconds(5));  // ~refitd_timeout + one heartbeat deadline
}

}  // namespace
}  // namespace refit
