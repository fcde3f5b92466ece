// refitd frozen (SIGSTOP) while members wait: with the client library's
// default options, every kind of wait (the plan before round 1, a key of the
// data-plane bootstrap, the next round) fails UNAVAILABLE within a few
// seconds of losing refitd, not at its own deadline (30 s here).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/refit_client.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/tiny_registration.h"

namespace refit {
namespace {

TEST(FrozenWaitsTest, EveryWaitFailsWithinSecondsOfAFrozenRefitd) {
  RefitdProcess refitd;
  ASSERT_TRUE(refitd.Start(absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"), {},
                           absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out"),
                           absl::Seconds(20))
                  .ok());
  RefitClient::Options o;  // the defaults, as a member has them
  o.target = absl::StrCat("127.0.0.1:", refitd.port());
  auto c = RefitClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  // Only the trainer: its plan wait parks (no engine yet), as before round 1.
  ASSERT_TRUE((*c)->Register(testing::TinyRegistration(true, "frozen")).ok());

  absl::Status plan, key, round;
  absl::Duration plan_took, key_took, round_took;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::thread t1([&] {
    plan = (*c)->AwaitPlan(deadline).status();
    plan_took = absl::Now() - deadline;
  });
  std::thread t2([&] {
    key = (*c)->KvGet("never-set", deadline).status();
    key_took = absl::Now() - deadline;
  });
  std::thread t3([&] {
    round = (*c)->WaitForRound(deadline).status();
    round_took = absl::Now() - deadline;
  });
  absl::SleepFor(absl::Milliseconds(500));  // all three parked
  ASSERT_EQ(kill(refitd.pid(), SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  const absl::Duration since = stopped - deadline;
  t1.join();
  t2.join();
  t3.join();
  kill(refitd.pid(), SIGCONT);
  for (auto [name, s, took] : {std::make_tuple("AwaitPlan", plan, plan_took - since),
                               std::make_tuple("KvGet", key, key_took - since),
                               std::make_tuple("WaitForRound", round, round_took - since)}) {
    std::printf("%-12s failed %.2f s after refitd froze: %s\n", name,
                absl::ToDoubleSeconds(took), s.ToString().c_str());
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << name << ": " << s;
    EXPECT_LT(took, absl::Seconds(5)) << name;
  }
}

}  // namespace
}  // namespace refit
