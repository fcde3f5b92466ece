// Members as separate processes (control_member) against an in-process
// refitd: the full flow with 2 trainer + 3 engine processes, and an engine
// process killed mid-round.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "server/test_planner.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

std::string MemberBinary() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/tests/control/control_member");
}

struct Proc {
  pid_t pid = -1;
  std::string out;  // stdout file
};

Proc Spawn(const std::string& name, std::vector<std::string> args) {
  Proc p;
  p.out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".out");
  p.pid = fork();
  if (p.pid == 0) {
    int fd = open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = MemberBinary();
    std::vector<char*> argv = {bin.data()};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return p;
}

// Returns the exit code, or -1 (after killing it) if it outlived `deadline`.
int WaitExit(Proc& p, absl::Time deadline) {
  int status = 0;
  while (absl::Now() < deadline) {
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &status, 0);
  return -1;
}

std::string Output(const Proc& p) {
  std::ifstream in(p.out);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<RefitServer> StartServer() {
  RefitServer::Options o;
  o.plan_function = NameMatchingPlan;
  o.heartbeat_timeout = absl::Seconds(1);
  auto s = RefitServer::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(MultiProcessTest, TwoTrainersThreeEnginesThreeRounds) {
  auto server = StartServer();
  const std::string target = absl::StrCat("--target=127.0.0.1:", server->port());
  std::vector<Proc> procs;
  procs.push_back(Spawn("t0", {target, "--side=trainer", "--rank=0", "--world=2",
                               "--buffers=w0", "--rounds=3", "--start"}));
  procs.push_back(Spawn("t1", {target, "--side=trainer", "--rank=1", "--world=2",
                               "--buffers=w1", "--rounds=3"}));
  procs.push_back(Spawn("a0", {target, "--side=engine", "--engine=A", "--rank=0",
                               "--world=2", "--buffers=w0", "--rounds=3"}));
  procs.push_back(Spawn("a1", {target, "--side=engine", "--engine=A", "--rank=1",
                               "--world=2", "--buffers=w1", "--rounds=3"}));
  procs.push_back(Spawn("b0", {target, "--side=engine", "--engine=B", "--rank=0",
                               "--world=1", "--buffers=w0,w1", "--rounds=3"}));
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  for (auto& p : procs) {
    EXPECT_EQ(WaitExit(p, deadline), 0) << Output(p);
    const std::string out = Output(p);
    for (int v = 1; v <= 3; ++v) EXPECT_THAT(out, HasSubstr(absl::StrCat("committed ", v)));
  }
}

TEST(MultiProcessTest, KilledEngineAbortsRoundEverywhereThenNextRoundCommits) {
  auto server = StartServer();
  const std::string target = absl::StrCat("--target=127.0.0.1:", server->port());
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", server->port());
  co.heartbeat_interval = absl::Milliseconds(100);
  auto trainer = RefitClient::Connect(co);
  ASSERT_TRUE(trainer.ok());
  v1::Registration reg;
  reg.mutable_identity()->set_job("job");
  reg.mutable_identity()->set_side(v1::SIDE_TRAINER);
  reg.mutable_identity()->set_world_size(1);
  for (const char* n : {"w0", "w1"}) {
    auto* b = reg.add_buffers();
    b->set_name(n);
    b->add_shape(16);
    b->set_dtype(3);
    b->set_byte_size(64);
  }
  ASSERT_TRUE((*trainer)->Register(reg).ok());
  Proc a = Spawn("ka", {target, "--side=engine", "--engine=A", "--world=1",
                        "--buffers=w0,w1", "--rounds=1"});
  Proc b = Spawn("kb", {target, "--side=engine", "--engine=B", "--world=1",
                        "--buffers=w0,w1", "--rounds=1", "--work_ms=20000"});
  RefitServer::Options unused;
  auto plan = (*trainer)->AwaitPlan(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Both engines must be in the plan before round 1.
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (plan.ok() && plan->bootstrap().global_world() < 3 && absl::Now() < until) {
    plan = (*trainer)->AwaitPlan(absl::Now() + absl::Seconds(20));
  }
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->bootstrap().global_world(), 3);
  ASSERT_TRUE((*trainer)->StartRound(1, absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE((*trainer)->WaitForRound(absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE((*trainer)->ReportDone(1, 128, 0.001, "", absl::Now() + absl::Seconds(5)).ok());
  absl::SleepFor(absl::Milliseconds(300));  // B is "transferring" now
  const absl::Time killed = absl::Now();
  kill(b.pid, SIGKILL);
  absl::Status out = (*trainer)->AwaitOutcome(1, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(out.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(out.message(), HasSubstr("engine B rank 0"));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));  // heartbeat timeout 1 s
  int status;
  waitpid(b.pid, &status, 0);

  // B comes back; round 2 commits with A and the new B.
  Proc b2 = Spawn("kb2", {target, "--side=engine", "--engine=B", "--world=1",
                          "--buffers=w0,w1", "--rounds=1"});
  absl::Status started;
  const absl::Time until2 = absl::Now() + absl::Seconds(20);
  do {
    if ((*trainer)->PlanChanged()) {
      ASSERT_TRUE((*trainer)->AwaitPlan(absl::Now() + absl::Seconds(10)).ok());
    }
    absl::SleepFor(absl::Milliseconds(50));
    auto st = (*trainer)->GetStatus(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(st.ok());
    if (st->members_size() < 3) continue;
    started = (*trainer)->StartRound(2, absl::Now() + absl::Seconds(5));
  } while (!started.ok() && absl::Now() < until2);
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE((*trainer)->ReportDone(2, 128, 0.001, "", absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE((*trainer)->AwaitOutcome(2, absl::Now() + absl::Seconds(10)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  EXPECT_EQ(WaitExit(a, deadline), 0) << Output(a);
  EXPECT_EQ(WaitExit(b2, deadline), 0) << Output(b2);
  EXPECT_THAT(Output(a), HasSubstr("aborted 1"));
  EXPECT_THAT(Output(a), HasSubstr("engine B rank 0"));
  EXPECT_THAT(Output(a), HasSubstr("committed 2"));
}

}  // namespace
}  // namespace refit
