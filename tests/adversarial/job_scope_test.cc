// Refusals and parked waits scoped to the job, against a refitd child: a
// refusal under another job name fails no member of the real job; refusals
// of one job are bounded in count, and their reasons reach members escaped
// and short enough for gRPC's metadata, even with every place held by
// refusals of other jobs; GetStatus lists a bounded number;
// KvGet waits parked by a member outside the plan (from any number of
// addresses) cannot use up the room of the plan's members: with waits from
// 17 addresses filling every bound, a real job's first round (Gloo, whose
// bootstrap parks KvGet waits) commits.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/member.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/host_members.h"
#include "testing/member_patterns.h"
#include "testing/refitd_process.h"
#include "testing/tiny_registration.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ParkedKvGets;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

std::string Runfile(const std::string& p) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/", p);
}
std::string TmpFile(const std::string& p) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", p);
}

// Engine `engine` rank `rank` of a `world`-rank replica of job `job`.
v1::Registration Engine(const std::string& job, const std::string& engine, int rank,
                        int world) {
  v1::Registration r = testing::TinyRegistration(false, job, engine);
  r.mutable_identity()->set_rank(rank);
  r.mutable_identity()->set_world_size(world);
  return r;
}

TEST(JobScopeTest, RefusalsTouchOnlyTheirJobAndReachMembersEscapedAndBounded) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--plan_settle_ms=5"},
                           TmpFile("refusals.out"), absl::Seconds(20))
                  .ok());
  auto t = testing::ConnectRefitd(refitd.port());
  auto a = testing::ConnectRefitd(refitd.port());
  auto r = testing::ConnectRefitd(refitd.port());
  ASSERT_TRUE(t && a && r);
  ASSERT_TRUE(t->Register(testing::TinyRegistration(true, "job")).ok());
  ASSERT_TRUE(a->Register(testing::TinyRegistration(false, "job", "A")).ok());
  // The outsider's 16,384 refusals of made-up engines of other jobs (64 of
  // them, 256 each: every place refitd has, --max_members), 4 KiB reasons
  // each, from 4 callers at once.
  const std::string big(4096, 'x');
  const absl::Time flood_start = absl::Now();
  std::vector<std::thread> callers;
  std::vector<int> refused(4, 0);
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      std::unique_ptr<RefitClient> caller = testing::ConnectRefitd(refitd.port());
      if (caller == nullptr) return;
      for (int i = c; i < 16384; i += 4) {
        const absl::Status s = caller->Refuse(
            Engine(absl::StrCat("other", i % 64), absl::StrCat("ghost", i), 0, 1), big,
            In(absl::Seconds(10)));
        if (!s.ok()) ++refused[c];
      }
    });
  }
  for (std::thread& c : callers) c.join();
  std::printf("16,384 refusals of other jobs (4 KiB reasons) in %.1f s, %d refused\n",
              absl::ToDoubleSeconds(absl::Now() - flood_start),
              refused[0] + refused[1] + refused[2] + refused[3]);
  EXPECT_EQ(refused, std::vector<int>(4, 0));
  // The real job plans as if they were not there.
  absl::StatusOr<v1::AwaitPlanResponse> plan = t->AwaitPlan(In(absl::Seconds(20)));
  EXPECT_TRUE(plan.ok()) << plan.status();
  // One job's refusals are bounded in count.
  absl::Status full = absl::OkStatus();
  for (int i = 0; i < 300 && full.ok(); ++i) {
    full = r->Refuse(Engine("crowd", absl::StrCat("e", i), 0, 1), "why", In(absl::Seconds(10)));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  // GetStatus lists a bounded number of them.
  absl::StatusOr<v1::StatusResponse> status = t->GetStatus(In(absl::Seconds(10)));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_LE(status->ByteSizeLong(), 256u << 10);
  EXPECT_THAT(status->refusals(status->refusals_size() - 1), HasSubstr("more refusals"));
  // Refusals of the real job's own engines (not registered: engine B's
  // ranks), with raw control bytes and 4 KiB of non-ASCII text: the plan
  // wait fails naming them, escaped, within gRPC's metadata limit.
  std::string accents;
  while (accents.size() < 4000) accents += "\xc3\xa9";
  for (int rank = 0; rank < 8; ++rank) {
    const absl::Status s = r->Refuse(Engine("job", "B", rank, 8),
                                     absl::StrCat("bad\x1b[2J\nlayout ", accents),
                                     In(absl::Seconds(10)));
    ASSERT_TRUE(s.ok()) << s;
  }
  plan = t->AwaitPlan(In(absl::Seconds(20)));
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
  const std::string msg(plan.status().message());
  EXPECT_THAT(msg, HasSubstr("engine B rank 0 refused to join: bad\\x1b[2J\\nlayout"));
  EXPECT_THAT(msg, HasSubstr("more members refused"));
  EXPECT_THAT(msg, Not(HasSubstr("\x1b")));
  EXPECT_TRUE(refitd.Alive());
}

TEST(JobScopeTest, WaitsOutsideThePlanCannotStarveThePlansMembers) {
  RefitdProcess refitd;
  // A small pool, so that one address can fill it.
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"),
                           {"--plan_settle_ms=5", "--max_kv_waits=64",
                            "--max_kv_waits_per_caller=64", "--max_kv_waits_per_member=64"},
                           TmpFile("waits.out"), absl::Seconds(20))
                  .ok());
  auto t = testing::ConnectRefitd(refitd.port());
  auto a = testing::ConnectRefitd(refitd.port());
  auto x = testing::ConnectRefitd(refitd.port());
  ASSERT_TRUE(t && a && x);
  ASSERT_TRUE(t->Register(testing::TinyRegistration(true, "job")).ok());
  ASSERT_TRUE(a->Register(testing::TinyRegistration(false, "job", "A")).ok());
  // A member of an incomplete replica: registered, never in a plan.
  ASSERT_TRUE(x->Register(Engine("job", "X", 1, 2)).ok());
  ASSERT_TRUE(t->AwaitPlan(In(absl::Seconds(20))).ok());
  ASSERT_TRUE(a->AwaitPlan(In(absl::Seconds(20))).ok());
  // 36 of the outsider's 100 waits are refused: the pool is full.
  ParkedKvGets parked(refitd.port(), *x, 100, absl::Seconds(60));
  int other = 0;
  ASSERT_EQ(parked.AwaitRefused(36, In(absl::Seconds(20)), &other), 36);
  EXPECT_EQ(other, 0);
  // The plan's members still park their bootstrap waits, and get the key.
  absl::StatusOr<std::string> v;
  std::thread getter([&] { v = t->KvGet("boot/0", In(absl::Seconds(20))); });
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(a->KvSet("boot/0", "addr", In(absl::Seconds(10))).ok());
  getter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "addr");
  EXPECT_TRUE(refitd.Alive());
}

// The outsider's replay at refitd's default bounds: 68 members of an engine
// replica that is never complete (never planned) park KvGet waits from 17
// addresses (127.0.0.2 .. 127.0.0.18), 256 each (--max_kv_waits_per_member),
// 1,024 from each address (--max_kv_waits_per_caller): the pool of waits
// outside the plan fills (--max_kv_waits, 16,384) and the last 1,024 are
// refused. A real job's first round, whose Gloo bootstrap parks KvGet waits
// of the plan's members, still commits, every byte checked.
TEST(JobScopeTest, WaitsFromSeventeenAddressesLeaveTheJobsFirstRoundCommitting) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(Runfile("server/refitd"), {"--plan_settle_ms=5"},
                           TmpFile("addresses.out"), absl::Seconds(20))
                  .ok());
  const absl::Time deadline = In(absl::Seconds(180));
  constexpr int kAddresses = 17, kPerAddress = 4, kPerMember = 256;
  std::vector<std::unique_ptr<RefitClient>> outsiders;
  for (int rank = 0; rank < kAddresses * kPerAddress; ++rank) {
    outsiders.push_back(testing::ConnectRefitd(refitd.port()));
    ASSERT_TRUE(outsiders.back());
    ASSERT_TRUE(outsiders.back()->Register(Engine("refit", "X", rank, 100)).ok()) << rank;
  }
  std::vector<testing::HostMember> job =
      testing::TrainerAndEngine(absl::StrCat("127.0.0.1:", refitd.port()), "tiny-llama");
  const absl::Status joined =
      testing::JoinHostMembers(job, [](size_t) { return DataPlaneOptions(); }, deadline);
  ASSERT_TRUE(joined.ok()) << joined;
  std::vector<std::unique_ptr<ParkedKvGets>> parked;
  for (int i = 0; i < kAddresses * kPerAddress; ++i) {
    parked.push_back(std::make_unique<ParkedKvGets>(
        refitd.port(), *outsiders[i], kPerMember, absl::Seconds(170),
        absl::StrCat("127.0.0.", 2 + i / kPerAddress)));
  }
  // 17,408 waits: 16,384 park, the other 1,024 are refused.
  int refused = 0, other = 0;
  while (refused < 1024 && other == 0 && absl::Now() < deadline) {
    for (auto& p : parked) {
      int o = 0;
      refused += p->AwaitRefused(kPerMember, In(absl::Milliseconds(5)), &o);
      other += o;
    }
  }
  EXPECT_EQ(refused, 1024);
  EXPECT_EQ(other, 0);
  // The job's first round commits, its bootstrap waits parked meanwhile.
  const absl::Time round_start = absl::Now();
  testing::HostRounds rounds = testing::RunHostRounds(
      job, 1, [](const Member& m, int64_t v) { return testing::FillMemberPattern(m, v); },
      [](const Member& m, int64_t v) { return testing::CheckMemberPattern(m, v); }, deadline);
  EXPECT_TRUE(rounds.FirstFailure().ok()) << rounds.FirstFailure();
  std::printf("16,384 waits parked from 17 addresses (%d refused): the job's first round "
              "%s in %.2f s\n",
              refused, rounds.FirstFailure().ok() ? "committed" : "failed",
              absl::ToDoubleSeconds(absl::Now() - round_start));
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit
