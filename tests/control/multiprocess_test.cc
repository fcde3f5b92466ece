// Members as separate processes (control_member) against an in-process
// refitd: the full flow with 2 trainer + 3 engine processes, and an engine
// process killed mid-round.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/refit_server.h"
#include "testing/name_matching_plan.h"

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
  absl::StatusOr<std::string> out = ReadFileToString(p.out, int64_t{64} << 20);
  return out.ok() ? *out : out.status().ToString();
}

// The heartbeat timeout of the tests' refitd: long enough for a loaded
// 2-core CI machine (members beat every 100 ms), short for a quick test.
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(3);

// refitd in process; a plan needs `min_engines` complete engines.
std::unique_ptr<RefitServer> StartServer(int min_engines = 1) {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  o.coordinator.min_engines = min_engines;
  o.coordinator.heartbeat_timeout = kHeartbeatTimeout;
  auto s = RefitServer::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(MultiProcessTest, TwoTrainersThreeEnginesThreeRounds) {
  // Both engines in the first plan, so every member takes part in rounds 1-3.
  auto server = StartServer(/*min_engines=*/2);
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

// Polls `p`'s output until it contains `text`; false after `deadline`.
bool WaitForOutput(const Proc& p, const std::string& text, absl::Time deadline) {
  while (absl::Now() < deadline) {
    if (Output(p).find(text) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST(MultiProcessTest, AMemberKilledBeforeTheFirstPlanFailsTheOthersPlanWaitsAtOnce) {
  // Two engines needed: engine A alone is no plan, so the trainer ranks
  // and A wait for the plan while B never comes.
  auto server = StartServer(/*min_engines=*/2);
  const std::string target = absl::StrCat("--target=127.0.0.1:", server->port());
  Proc t0 = Spawn("pt0", {target, "--side=trainer", "--rank=0", "--world=2",
                          "--buffers=w0", "--deadline_s=60"});
  Proc t1 = Spawn("pt1", {target, "--side=trainer", "--rank=1", "--world=2",
                          "--buffers=w1", "--deadline_s=60"});
  Proc a = Spawn("pa", {target, "--side=engine", "--engine=A", "--world=1",
                        "--buffers=w0,w1", "--deadline_s=60"});
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", server->port());
  auto client = RefitClient::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 500; ++i) {
    auto st = (*client)->GetStatus(absl::Now() + absl::Seconds(5));
    if (st.ok() && st->members_size() == 3) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(300));  // the plan waits are parked
  const absl::Time killed = absl::Now();
  kill(t1.pid, SIGKILL);
  int status;
  waitpid(t1.pid, &status, 0);
  // t1 expires after the heartbeat timeout; the others' waits end then,
  // not at their own 60 s deadline, and say which member is missing.
  for (Proc* p : {&t0, &a}) {
    EXPECT_EQ(WaitExit(*p, killed + kHeartbeatTimeout + absl::Seconds(3)), 1) << Output(*p);
    EXPECT_THAT(Output(*p), HasSubstr("error plan: UNAVAILABLE: membership incomplete: "
                                      "trainer rank 1 expired"));
  }
  EXPECT_LT(absl::Now() - killed, kHeartbeatTimeout + absl::Seconds(3));
}

// The trainer side of the killed/hung member tests: one in-process trainer
// rank holding w0 and w1.
std::unique_ptr<RefitClient> ConnectTrainer(int port) {
  RefitClient::Options co;
  co.target = absl::StrCat("127.0.0.1:", port);
  co.heartbeat_interval = absl::Milliseconds(100);
  auto trainer = RefitClient::Connect(co);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return nullptr;
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
  auto id = (*trainer)->Register(reg);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? std::move(*trainer) : nullptr;
}

// Awaits plans until one spans `world` members (trainer + engine ranks).
absl::StatusOr<v1::AwaitPlanResponse> AwaitPlanOfWorld(RefitClient& c, int world) {
  const absl::Time until = absl::Now() + absl::Seconds(20);
  absl::StatusOr<v1::AwaitPlanResponse> plan =
      absl::DeadlineExceededError("no plan yet");
  while (absl::Now() < until) {
    plan = c.AwaitPlan(until);
    if (plan.ok() && plan->bootstrap().global_world() == world) return plan;
    if (plan.ok()) absl::SleepFor(absl::Milliseconds(20));
  }
  return plan.ok() ? absl::DeadlineExceededError(absl::StrCat(
                         "plan world stayed ", plan->bootstrap().global_world()))
                   : plan.status();
}

// Runs round `v` from the trainer's side to its outcome; retries StartRound
// while a new plan is being built.
absl::Status TrainerRound(RefitClient& c, int64_t v) {
  absl::Status s;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  do {
    s = c.StartRound(v, absl::Now() + absl::Seconds(5));
    if (absl::IsUnavailable(s)) absl::SleepFor(absl::Milliseconds(20));
  } while (absl::IsUnavailable(s) && absl::Now() < until);
  REFIT_RETURN_IF_ERROR(s);
  auto got = c.WaitForRound(absl::Now() + absl::Seconds(5));
  REFIT_RETURN_IF_ERROR(got.status());
  if (*got != v) return absl::InternalError(absl::StrCat("saw round ", *got));
  REFIT_RETURN_IF_ERROR(c.ReportDone(v, {128, 0.001}, absl::Now() + absl::Seconds(5)));
  return c.AwaitOutcome(v, absl::Now() + absl::Seconds(10));
}

// Engines A and B join; round 1 starts and the trainer reports done. A
// reports done too; B stays "transferring" for 20 s (--work_ms), so the
// caller can kill or stop it mid-round.
void StartRoundOneWithBusyEngineB(RefitClient& trainer, const std::string& target,
                                  const std::string& tag, Proc* a, Proc* b) {
  *a = Spawn(tag + "a", {target, "--side=engine", "--engine=A", "--world=1",
                         "--buffers=w0,w1", "--rounds=1"});
  *b = Spawn(tag + "b", {target, "--side=engine", "--engine=B", "--world=1",
                         "--buffers=w0,w1", "--rounds=1", "--work_ms=20000"});
  // Both engines must be in the plan (and have their streams) before round 1.
  ASSERT_TRUE(AwaitPlanOfWorld(trainer, 3).ok());
  ASSERT_TRUE(WaitForOutput(*a, "plan ", absl::Now() + absl::Seconds(20))) << Output(*a);
  ASSERT_TRUE(WaitForOutput(*b, "plan ", absl::Now() + absl::Seconds(20))) << Output(*b);
  ASSERT_TRUE(trainer.StartRound(1, absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE(trainer.WaitForRound(absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE(trainer.ReportDone(1, {128, 0.001}, absl::Now() + absl::Seconds(5)).ok());
}

TEST(MultiProcessTest, KilledEngineAbortsRoundEverywhereThenRestartedEngineCommits) {
  auto server = StartServer();
  const std::string target = absl::StrCat("--target=127.0.0.1:", server->port());
  auto trainer = ConnectTrainer(server->port());
  ASSERT_NE(trainer, nullptr);
  Proc a, b;
  StartRoundOneWithBusyEngineB(*trainer, target, "k", &a, &b);
  if (HasFatalFailure()) return;
  // A reports done and waits for the outcome; B is "transferring" (20 s).
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time killed = absl::Now();
  kill(b.pid, SIGKILL);
  absl::Status out = trainer->AwaitOutcome(1, absl::Now() + absl::Seconds(5));
  const absl::Duration took = absl::Now() - killed;
  EXPECT_EQ(out.code(), absl::StatusCode::kAborted) << out;
  EXPECT_THAT(std::string(out.message()), HasSubstr("engine B rank 0"));
  EXPECT_LT(took, kHeartbeatTimeout);  // the dropped stream, not a timeout
  // The other engine process learns of the abort too, naming B.
  EXPECT_TRUE(WaitForOutput(a, "aborted 1", absl::Now() + absl::Seconds(5))) << Output(a);
  EXPECT_THAT(Output(a), HasSubstr("engine B rank 0"));
  int status;
  waitpid(b.pid, &status, 0);

  // B comes back; once its Register returned (it printed its plan), round 2
  // commits with A and the new B.
  Proc b2 = Spawn("kb2", {target, "--side=engine", "--engine=B", "--world=1",
                          "--buffers=w0,w1", "--rounds=1"});
  ASSERT_TRUE(WaitForOutput(b2, "plan ", absl::Now() + absl::Seconds(20))) << Output(b2);
  // B's expiry and B2's join moved the membership on twice; the trainer
  // hears of it on its round stream, possibly after B2 printed its plan.
  const absl::Time heard = absl::Now() + absl::Seconds(10);
  while (!trainer->PlanChanged() && absl::Now() < heard) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(trainer->PlanChanged()) << "the trainer never heard of the new membership";
  ASSERT_TRUE(AwaitPlanOfWorld(*trainer, 3).ok());
  absl::Status r2 = TrainerRound(*trainer, 2);
  EXPECT_TRUE(r2.ok()) << r2 << "\nA: " << Output(a) << "\nB: " << Output(b2);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  EXPECT_EQ(WaitExit(a, deadline), 0) << Output(a);
  EXPECT_EQ(WaitExit(b2, deadline), 0) << Output(b2);
  EXPECT_THAT(Output(a), HasSubstr("committed 2"));
  EXPECT_THAT(Output(b2), HasSubstr("committed 2"));
}

TEST(MultiProcessTest, HungEngineExpiresAtHeartbeatDeadlineAndRoundCommitsWithoutIt) {
  auto server = StartServer();
  const std::string target = absl::StrCat("--target=127.0.0.1:", server->port());
  auto trainer = ConnectTrainer(server->port());
  ASSERT_NE(trainer, nullptr);
  Proc a, b;
  StartRoundOneWithBusyEngineB(*trainer, target, "h", &a, &b);
  if (HasFatalFailure()) return;
  absl::SleepFor(absl::Milliseconds(200));
  // B hangs: its connection stays open but it sends nothing any more.
  const absl::Time stopped = absl::Now();
  kill(b.pid, SIGSTOP);
  absl::Status out = trainer->AwaitOutcome(1, absl::Now() + absl::Seconds(10));
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_EQ(out.code(), absl::StatusCode::kAborted) << out;
  EXPECT_THAT(std::string(out.message()), HasSubstr("engine B rank 0"));
  EXPECT_THAT(std::string(out.message()), HasSubstr("heart-beating"));
  // Aborted by the heartbeat deadline (the message says so), well before the
  // round timeout. No lower bound: on a loaded machine B's last heartbeat may
  // predate the SIGSTOP. The upper slack covers a saturated 2-core CI box.
  EXPECT_LT(took, kHeartbeatTimeout + absl::Seconds(3));
  EXPECT_TRUE(WaitForOutput(a, "aborted 1", absl::Now() + absl::Seconds(3))) << Output(a);

  // The membership shrank to A: a new plan without B, and round 2 commits.
  auto plan = AwaitPlanOfWorld(*trainer, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::Status r2 = TrainerRound(*trainer, 2);
  EXPECT_TRUE(r2.ok()) << r2 << "\nA: " << Output(a);
  EXPECT_EQ(WaitExit(a, absl::Now() + absl::Seconds(20)), 0) << Output(a);
  EXPECT_THAT(Output(a), HasSubstr("committed 2"));
  kill(b.pid, SIGKILL);
  int status;
  waitpid(b.pid, &status, 0);
}

}  // namespace
}  // namespace refit
