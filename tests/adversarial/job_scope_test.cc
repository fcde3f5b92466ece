// Refusals and parked waits scoped to the job, against a refitd child: a
// refusal under another job name fails no member of the real job; refusals
// of one job are bounded in count, and their reasons reach members escaped
// and short enough for gRPC's metadata; GetStatus lists a bounded number;
// KvGet waits parked by a member outside the plan (from any number of
// addresses) cannot use up the room of the plan's members.
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

std::unique_ptr<RefitClient> Connect(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
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
  auto t = Connect(refitd.port());
  auto a = Connect(refitd.port());
  auto r = Connect(refitd.port());
  ASSERT_TRUE(t && a && r);
  ASSERT_TRUE(t->Register(testing::TinyRegistration(true, "job")).ok());
  ASSERT_TRUE(a->Register(testing::TinyRegistration(false, "job", "A")).ok());
  // 300 refusals of made-up engines of other jobs, 4 KiB reasons each.
  const std::string big(4096, 'x');
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(r->Refuse(Engine(absl::StrCat("other", i % 3), absl::StrCat("ghost", i), 0, 1),
                          big, In(absl::Seconds(10)))
                    .ok())
        << i;
  }
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
  auto t = Connect(refitd.port());
  auto a = Connect(refitd.port());
  auto x = Connect(refitd.port());
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

}  // namespace
}  // namespace refit
