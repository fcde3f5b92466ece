// Identity takeover against a refitd child process: a token holder who
// knows a member's identity (job, side, engine id, rank) cannot take its
// place, whether its round stream is open or not, before it starts, or
// right after refitd restarts (with a job key); a replaced secret cannot
// be replayed while refitd remembers it (its identity's last 8 retired
// secrets), and once forgotten gains no more than the job key; a
// registration under another job cannot squat the job; and a member's plan
// slice and the bootstrap keys need the member's secret.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "common/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/refit_service.grpc.pb.h"
#include "testing/refitd_process.h"
#include "testing/restart_port.h"
#include "testing/tiny_registration.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using testing::TinyRegistration;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

std::string Refitd() { return absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"); }
std::string Tmp(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// A token holder's own client of refitd (no member of the job).
class Outsider {
 public:
  explicit Outsider(int port) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    service_ = v1::RefitService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
  }

  absl::StatusOr<v1::RegisterResponse> Register(const v1::Registration& reg,
                                                const std::string& secret,
                                                const std::string& job_key = "") {
    v1::RegisterRequest req;
    *req.mutable_registration() = reg;
    req.set_member_secret(secret);
    req.set_job_key(job_key);
    v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);
    absl::Status s = FromGrpcStatus(service_->Register(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }
  absl::Status Heartbeat(const std::string& id, const std::string& secret) {
    v1::HeartbeatRequest req;
    req.set_member_id(id);
    req.set_member_secret(secret);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return FromGrpcStatus(service_->Heartbeat(&ctx, req, &resp));
  }
  absl::Status AwaitPlan(const std::string& id, const std::string& secret) {
    v1::AwaitPlanRequest req;
    req.set_member_id(id);
    req.set_member_secret(secret);
    v1::AwaitPlanResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return FromGrpcStatus(service_->AwaitPlan(&ctx, req, &resp));
  }
  absl::Status KvGet(const std::string& key, const std::string& id, const std::string& secret) {
    v1::KvGetRequest req;
    req.set_key(key);
    req.set_member_id(id);
    req.set_member_secret(secret);
    v1::KvGetResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return FromGrpcStatus(service_->KvGet(&ctx, req, &resp));
  }

 private:
  std::unique_ptr<v1::RefitService::Stub> service_;
};

std::unique_ptr<RefitClient> Member(int port, const std::string& job_key = "") {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.heartbeat_interval = absl::Milliseconds(200);
  o.job_key = job_key;
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(IdentityTest, AMemberWhoseStreamDroppedKeepsItsPlaceAndItsDataIsItsOwn) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Refitd(), {"--heartbeat_timeout_ms=5000"}, Tmp("a.out"),
                           absl::Seconds(20)).ok());
  Outsider member(refitd.port()), thief(refitd.port());
  // The member registers and heart-beats, its round stream closed (dropped).
  const v1::Registration reg = TinyRegistration(true, "job");
  auto mine = member.Register(reg, "the-members-secret-0123456789abc");
  ASSERT_TRUE(mine.ok()) << mine.status();
  auto engine = Member(refitd.port());
  ASSERT_TRUE(engine->Register(TinyRegistration(false, "job", "A")).ok());
  ASSERT_TRUE(member.AwaitPlan(mine->member_id(), mine->member_secret()).ok());
  ASSERT_TRUE(engine->KvSet("bootstrap/addr", "10.0.0.1:1234", In(absl::Seconds(5))).ok());
  // The thief sends the same registration, with no secret or its own.
  const absl::Time t0 = absl::Now();
  for (const std::string& s : {std::string(""), std::string("thief-secret")}) {
    auto stolen = thief.Register(reg, s);
    EXPECT_FALSE(stolen.ok()) << "the thief got secret " << stolen->member_secret();
    EXPECT_THAT(std::string(stolen.status().message()),
                HasSubstr("is registered with another member secret"));
  }
  std::printf("takeover refused in %.1f ms\n", absl::ToDoubleMilliseconds(absl::Now() - t0));
  // The member still acts, and reads its plan; the thief reads nothing.
  EXPECT_TRUE(member.Heartbeat(mine->member_id(), mine->member_secret()).ok());
  EXPECT_TRUE(member.AwaitPlan(mine->member_id(), mine->member_secret()).ok());
  EXPECT_TRUE(member.KvGet("bootstrap/addr", mine->member_id(), mine->member_secret()).ok());
  EXPECT_EQ(thief.AwaitPlan(mine->member_id(), "").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(thief.KvGet("bootstrap/addr", "", "").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(thief.KvGet("bootstrap/addr", mine->member_id(), "guess").code(),
            absl::StatusCode::kPermissionDenied);
  std::printf("refitd peak RSS %.1f MiB\n", refitd.PeakRssKib() / 1024.0);
}

TEST(IdentityTest, WithAJobKeyNoOutsiderSquatsTheJobOrAMemberEvenRightAfterARestart) {
  const std::string key_file = Tmp("job.key");
  std::ofstream(key_file) << "the-job-key\n";
  // Below the ephemeral range: no other test takes it while refitd is down.
  absl::StatusOr<int> free_port = RestartablePort();
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  RefitdProcess first;
  ASSERT_TRUE(first
                  .Start(Refitd(),
                         {absl::StrCat("--job_key_file=", key_file),
                          absl::StrCat("--address=127.0.0.1:", *free_port)},
                         Tmp("b.out"), absl::Seconds(20))
                  .ok());
  const int port = first.port();
  // An outsider registers first, under another job and as the trainer.
  Outsider outsider(port);
  for (const std::string& job : {"squat", "job"}) {
    auto squat = outsider.Register(TinyRegistration(true, job), "s");
    EXPECT_EQ(squat.status().code(), absl::StatusCode::kPermissionDenied) << job;
    EXPECT_THAT(std::string(squat.status().message()), HasSubstr("job_key: missing"));
  }
  auto trainer = Member(port, "the-job-key");
  auto engine = Member(port, "the-job-key");
  ASSERT_TRUE(trainer->Register(TinyRegistration(true, "job")).ok());
  ASSERT_TRUE(engine->Register(TinyRegistration(false, "job", "A")).ok());
  ASSERT_TRUE(trainer->AwaitPlan(In(absl::Seconds(10))).ok());

  // refitd restarts on the same port; the outsider is there first.
  kill(first.pid(), SIGKILL);
  RefitdProcess second;
  ASSERT_TRUE(second
                  .Start(Refitd(),
                         {absl::StrCat("--job_key_file=", key_file),
                          absl::StrCat("--address=127.0.0.1:", port)},
                         Tmp("c.out"), absl::Seconds(20))
                  .ok());
  Outsider racer(port);
  const absl::Time raced = absl::Now();
  auto taken = racer.Register(TinyRegistration(true, "job"), "");
  while (absl::IsUnavailable(taken.status()) && absl::Now() - raced < absl::Seconds(5)) {
    taken = racer.Register(TinyRegistration(true, "job"), "");
  }
  std::printf("outsider answered %.1f ms after refitd restarted: %s\n",
              absl::ToDoubleMilliseconds(absl::Now() - raced), taken.status().ToString().c_str());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied);
  // The members take their places back, and get a plan.
  const absl::Time back = absl::Now();
  ASSERT_TRUE(trainer->Rejoin(In(absl::Seconds(20))).ok());
  ASSERT_TRUE(engine->Rejoin(In(absl::Seconds(20))).ok());
  absl::StatusOr<v1::AwaitPlanResponse> plan = trainer->AwaitPlan(In(absl::Seconds(10)));
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::printf("members back with a plan %.2f s after refitd restarted; peak RSS %.1f MiB\n",
              absl::ToDoubleSeconds(absl::Now() - back), second.PeakRssKib() / 1024.0);
}

TEST(IdentityTest, ARestartedProcessTakesItsPlaceAndTheOldSecretCannotBeReplayed) {
  const std::string key_file = Tmp("job2.key");
  std::ofstream(key_file) << "k2\n";
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Refitd(), {absl::StrCat("--job_key_file=", key_file)}, Tmp("d.out"),
                           absl::Seconds(20)).ok());
  Outsider old_process(refitd.port()), new_process(refitd.port());
  const v1::Registration reg = TinyRegistration(true, "job");
  auto old_reg = old_process.Register(reg, "old-secret-0123456789abcdef0123", "k2");
  ASSERT_TRUE(old_reg.ok()) << old_reg.status();
  auto new_reg = new_process.Register(reg, "new-secret-0123456789abcdef0123", "k2");
  ASSERT_TRUE(new_reg.ok()) << new_reg.status();
  EXPECT_EQ(old_process.Heartbeat(old_reg->member_id(), "old-secret-0123456789abcdef0123").code(),
            absl::StatusCode::kPermissionDenied);
  auto replay = old_process.Register(reg, "old-secret-0123456789abcdef0123", "k2");
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(replay.status().message()), HasSubstr("replaced by a newer registration"));
  EXPECT_TRUE(new_process.Heartbeat(new_reg->member_id(), "new-secret-0123456789abcdef0123").ok());
  // The documented bound, 8 retired secrets per identity: after 7 more
  // takeovers the old secret is still refused; after an 8th it is
  // forgotten, and gains its holder what any holder of the job key has
  // (taking the member over), nothing without the key.
  auto take_over = [&](int i) {
    return new_process.Register(reg, absl::StrCat("takeover-", i, "-0123456789abcdef0123"), "k2")
        .status();
  };
  for (int i = 1; i <= 7; ++i) ASSERT_TRUE(take_over(i).ok()) << i;
  replay = old_process.Register(reg, "old-secret-0123456789abcdef0123", "k2");
  EXPECT_THAT(std::string(replay.status().message()), HasSubstr("replaced by a newer registration"));
  ASSERT_TRUE(take_over(8).ok());
  replay = old_process.Register(reg, "old-secret-0123456789abcdef0123");
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kPermissionDenied) << replay.status();
  EXPECT_THAT(std::string(replay.status().message()), HasSubstr("job_key"));
  EXPECT_EQ(old_process.Heartbeat(old_reg->member_id(), "old-secret-0123456789abcdef0123").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(old_process.Register(reg, "old-secret-0123456789abcdef0123", "k2").ok());
}

}  // namespace
}  // namespace refit
