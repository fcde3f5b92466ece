// Hostile text and counts from peers, against a refitd child process: a
// 60 MiB host_id is refused at once naming the field; members past
// --max_members are refused; a host_id carrying a newline, ESC and NUL
// neither forges a line of refitd's text log nor reaches `refit status`'s
// output raw; 20,000 parked KvGet(wait) calls from one address are bounded
// (RESOURCE_EXHAUSTED beyond --max_kv_waits_per_member) while a member's
// KvSet stays fast. Each prints refitd's peak RSS.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"
#include "proto/refit_service.grpc.pb.h"
#include "testing/refitd_process.h"
#include "testing/test_paths.h"
#include "tests/adversarial/h2_wire.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::refit::testing::Runfile;
using ::refit::testing::TmpFile;


// A trainer registration naming the built-in tiny-qwen3 with one buffer
// (enough to be admitted; planning is not exercised).
v1::Registration Trainer(const std::string& host_id, int rank = 0, int world = 1) {
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  auto* id = r.mutable_identity();
  id->set_job("text");
  id->set_side(v1::SIDE_TRAINER);
  id->set_rank(rank);
  id->set_world_size(world);
  id->set_host_id(host_id);
  r.set_model_config("tiny-qwen3");
  r.set_convention(absl::StrCat("fsdp:dp=", world));
  v1::LocalBuffer* b = r.add_buffers();
  b->set_name("model.norm.weight");
  b->add_shape(64);
  b->set_dtype(2);
  b->set_byte_size(128);
  return r;
}

std::unique_ptr<RefitClient> Connect(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.refitd_timeout = absl::Seconds(5);
  auto c = RefitClient::Connect(o);
  return c.ok() ? std::move(*c) : nullptr;
}

grpc::Status RawRegister(RefitClient& c, const v1::Registration& reg,
                         v1::RegisterResponse* resp, const std::string& secret = "") {
  v1::RegisterRequest req;
  *req.mutable_registration() = reg;
  req.set_member_secret(secret);
  auto ctx = c.MakeContext(absl::Now() + absl::Seconds(20));
  return c.stub()->Register(ctx.get(), req, resp);
}

TEST(PeerTextTest, A60MiBHostIdIsRefusedAtOnceNamingTheField) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {}, TmpFile("host.log"), absl::Seconds(20))
                  .ok());
  auto c = Connect(refitd.port());
  ASSERT_NE(c, nullptr);
  const absl::Time start = absl::Now();
  v1::RegisterResponse resp;
  grpc::Status st = RawRegister(*c, Trainer(std::string(60 << 20, 'h')), &resp);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), "registration.identity.host_id"))
      << st.error_message();
  // Refused once read (gRPC reads a message whole before the handler): 2-5 s
  // alone on the loaded 2-core machine, 11-15 s beside other refitd tests,
  // from refitd of either branch of 2026-12-06.
  EXPECT_LT(seconds, 30.0);
  // Nothing of it is kept: the status stays small.
  absl::StatusOr<v1::StatusResponse> status = c->GetStatus(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->members_size(), 0);
  EXPECT_LT(status->ByteSizeLong(), 4096u);
  std::printf("60 MiB host_id: refused in %.2f s, refitd peak RSS %.1f MiB\n", seconds,
              refitd.PeakRssKib() / 1024.0);
}

TEST(PeerTextTest, MembersPastMaxMembersAreRefused) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd
                  .Start(Runfile("server/refitd"), {"--max_members=3"}, TmpFile("members.log"),
                         absl::Seconds(20))
                  .ok());
  auto c = Connect(refitd.port());
  ASSERT_NE(c, nullptr);
  std::string first_secret;
  for (int rank = 0; rank < 4; ++rank) {
    v1::RegisterResponse resp;
    grpc::Status st = RawRegister(*c, Trainer("h", rank, 8), &resp);
    if (rank == 0) first_secret = resp.member_secret();
    if (rank < 3) {
      EXPECT_TRUE(st.ok()) << rank << ": " << st.error_message();
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_TRUE(absl::StrContains(st.error_message(), "--max_members")) << st.error_message();
    }
  }
  // A member already there may still register again (with its secret).
  v1::RegisterResponse resp;
  grpc::Status again = RawRegister(*c, Trainer("h", 0, 8), &resp, first_secret);
  EXPECT_TRUE(again.ok()) << again.error_message();
}

// Runs `argv` with stdout and stderr into `out`; returns its exit code.
int RunCommand(const std::vector<std::string>& argv, std::string* out) {
  const std::string path = TmpFile("command.out");
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(path.c_str(), "w", stdout);
    if (f == nullptr) _exit(127);
    dup2(fileno(stdout), 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  absl::StatusOr<std::string> text = ReadFileToString(path, 16 << 20);
  *out = text.ok() ? *text : "";
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(PeerTextTest, ControlCharactersNeverForgeLogLinesNorReachTheTerminal) {
  RefitdProcess refitd;
  const std::string log = TmpFile("escape.log");
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {}, log, absl::Seconds(20)).ok());
  auto c = Connect(refitd.port());
  ASSERT_NE(c, nullptr);
  const std::string forged = "[2026-01-01 00:00:00.000] [refitd] [info] forged";
  const std::string host = absl::StrCat("h\n", forged, "\r\x1b[2J", std::string(1, '\0'), "x");
  v1::RegisterResponse resp;
  grpc::Status st = RawRegister(*c, Trainer(host), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  absl::SleepFor(absl::Milliseconds(200));
  absl::StatusOr<std::string> text = ReadFileToString(log, 16 << 20);
  ASSERT_TRUE(text.ok());
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, forged)) << "forged log line: " << line;
  }
  EXPECT_EQ(text->find('\x1b'), std::string::npos);
  EXPECT_EQ(text->find('\0'), std::string::npos);
  EXPECT_TRUE(absl::StrContains(*text, "host=h\\n[2026")) << *text;

  std::string out;
  ASSERT_EQ(RunCommand({Runfile("cli/refit"), "status",
                        absl::StrCat("--server=127.0.0.1:", refitd.port())},
                       &out),
            0)
      << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\0'), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, forged)) << "forged status line: " << line;
  }
  EXPECT_TRUE(absl::StrContains(out, "host=h\\n[2026")) << out;
}

using ::refit::testing::CpuSeconds;

TEST(PeerTextTest, ParkedKvGetsAreBoundedAndKvSetStaysFast) {
  const int kAttempts = std::getenv("REFIT_ADVERSARIAL_SOAK") != nullptr ? 50000 : 20000;
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {}, TmpFile("kvwait.log"),
                           absl::Seconds(20))
                  .ok());
  auto member = Connect(refitd.port());
  ASSERT_NE(member, nullptr);
  ASSERT_TRUE(member->Register(Trainer("h")).ok());
  // Every call beyond the per-member bound (--max_kv_waits_per_member,
  // 256) is answered at once.
  const int kParked = 256;
  testing::ParkedKvGets parked(refitd.port(), *member, kAttempts, absl::Seconds(120));
  int other = 0;
  const int exhausted =
      parked.AwaitRefused(kAttempts - kParked, absl::Now() + absl::Seconds(60), &other);
  EXPECT_EQ(exhausted, kAttempts - kParked);
  EXPECT_EQ(other, 0);
  // Idle with the parked waits: refitd's housekeeping does not walk them.
  const double cpu_before = CpuSeconds(refitd.pid());
  absl::SleepFor(absl::Seconds(2));
  const double idle_cpu = (CpuSeconds(refitd.pid()) - cpu_before) / 2;
  // A member's KvSet while the parked ones stay.
  std::vector<double> ms;
  for (int i = 0; i < 200; ++i) {
    const absl::Time t = absl::Now();
    ASSERT_TRUE(member->KvSet(absl::StrCat("k/", i), "v", absl::Now() + absl::Seconds(5)).ok());
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%d KvGet(wait) attempts: %d refused, refitd idle CPU %.0f%%, KvSet p50 %.2f ms "
              "p99 %.2f ms, refitd peak RSS %.1f MiB\n",
              kAttempts, exhausted, idle_cpu * 100, ms[ms.size() / 2], ms[ms.size() * 99 / 100],
              refitd.PeakRssKib() / 1024.0);
  EXPECT_LT(idle_cpu, 0.10);
  EXPECT_LT(ms[ms.size() / 2], 5.0);
  EXPECT_LT(refitd.PeakRssKib(), 512 * 1024);
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit
