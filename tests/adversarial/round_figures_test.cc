// Absurd round versions and report figures against a refitd child process:
// StartRound(INT64_MAX) and figures that would corrupt the round's sum or
// its status (bytes INT64_MAX, above what the member's plan slice moves;
// negative bytes, NaN seconds) are refused INVALID_ARGUMENT naming the
// field, the round still commits with sane figures, its /metrics counters
// hold only the accepted reports, and later versions start. A heartbeat's
// bytes so far above the plan slice or negative leave refitd's live figure
// as it was.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/refit_client.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/refitd_process.h"
#include "testing/tiny_registration.h"
#include "tests/adversarial/metrics_scrape.h"
#include "tests/adversarial/refitd_peers.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

absl::Status Start(RefitClient& t, int64_t v) {
  absl::Status s = t.StartRound(v, In(absl::Seconds(10)));
  while (absl::IsUnavailable(s)) {
    absl::SleepFor(absl::Milliseconds(10));
    s = t.StartRound(v, In(absl::Seconds(10)));
  }
  return s;
}

// Returns the sum of the refit_member_bytes_total lines (every transport)
// of a /metrics page.
int64_t MemberBytesTotal(const std::string& page) {
  int64_t sum = 0;
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (!absl::ConsumePrefix(&line, "refit_member_bytes_total{")) continue;
    int64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &v)) << line;
    sum += v;
  }
  return sum;
}

// Starts refitd with `flags` (its output in `log`) and joins a tiny job's
// trainer `*t` and engine "A" `*e`, both holding the plan; returns the first
// failure.
absl::Status StartJob(RefitdProcess& refitd, const std::vector<std::string>& flags,
                      const std::string& log, std::unique_ptr<RefitClient>* t,
                      std::unique_ptr<RefitClient>* e) {
  REFIT_RETURN_IF_ERROR(refitd.Start(
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/refit/server/refitd"), flags, log,
      absl::Seconds(20)));
  *t = testing::JoinRefitd(refitd.port(), testing::TinyRegistration(true, "job"));
  *e = testing::JoinRefitd(refitd.port(), testing::TinyRegistration(false, "job", "A"));
  if (!*t || !*e) return absl::UnavailableError("a member did not join");
  REFIT_RETURN_IF_ERROR((*t)->AwaitPlan(In(absl::Seconds(20))).status());
  return (*e)->AwaitPlan(In(absl::Seconds(20))).status();
}

TEST(RoundFiguresTest, AbsurdVersionsAndFiguresAreRefusedNamingTheField) {
  const std::string log = absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.out");
  RefitdProcess refitd;
  std::unique_ptr<RefitClient> t, e;
  ASSERT_TRUE(StartJob(refitd, {"--plan_settle_ms=5", "--metrics_port=0"}, log, &t, &e).ok());
  const int64_t max = std::numeric_limits<int64_t>::max();
  for (int64_t v : {max, (int64_t{1} << 53) + 1, int64_t{0}, int64_t{-3}}) {
    absl::Status s = Start(*t, v);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << v << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("version: "));
  }
  ASSERT_TRUE(Start(*t, 1).ok());
  ASSERT_TRUE(t->WaitForRound(In(absl::Seconds(10))).ok());
  ASSERT_TRUE(e->WaitForRound(In(absl::Seconds(10))).ok());
  // More bytes than the trainer's plan slice moves.
  absl::Status huge = t->ReportDone(1, {max, 1.0, 0}, In(absl::Seconds(10)));
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument) << huge;
  EXPECT_THAT(std::string(huge.message()), HasSubstr("plan slice moves"));
  ASSERT_TRUE(t->ReportDone(1, {4096, 1.0, 0}, In(absl::Seconds(10))).ok());
  struct Bad {
    RefitClient::RoundFigures figures;
    const char* field;
  };
  // A round's bytes are what its engine ranks received; the sum of engine
  // figures cannot overflow (rounds_test checks that with two engines).
  for (const Bad& bad : {Bad{{-5, 1.0, 0}, "bytes: "},
                         Bad{{1, std::nan(""), 0}, "seconds: "},
                         Bad{{1, -1.0, 0}, "seconds: "},
                         Bad{{1, 1.0, -7}, "peak_staging_bytes: "}}) {
    absl::Status s = e->ReportDone(1, bad.figures, In(absl::Seconds(10)));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.field << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(bad.field));
  }
  ASSERT_TRUE(e->ReportDone(1, {4096, 1.0, 0}, In(absl::Seconds(10))).ok());
  EXPECT_TRUE(t->AwaitOutcome(1, In(absl::Seconds(10))).ok());
  absl::StatusOr<v1::StatusResponse> status = t->GetStatus(In(absl::Seconds(10)));
  ASSERT_TRUE(status.ok());
  ASSERT_GT(status->rounds_size(), 0);
  EXPECT_EQ(status->rounds(status->rounds_size() - 1).bytes(), 4096);
  EXPECT_TRUE(std::isfinite(status->rounds(status->rounds_size() - 1).seconds()));
  // The counters hold the accepted reports only: the round's 4096 bytes,
  // and the two members' 4096 each.
  std::string page = testing::ScrapeMetrics(testing::MetricsPort(log));
  EXPECT_THAT(page, HasSubstr("\nrefit_round_bytes_total 4096\n")) << page;
  EXPECT_EQ(MemberBytesTotal(page), 8192) << page;
  // Round 2, INT64_MAX from both members again: refused, and the counters
  // add only the accepted reports (they read -2 after two such rounds when
  // INT64_MAX was taken).
  ASSERT_TRUE(Start(*t, 2).ok());  // later versions still start
  ASSERT_TRUE(t->WaitForRound(In(absl::Seconds(10))).ok());
  ASSERT_TRUE(e->WaitForRound(In(absl::Seconds(10))).ok());
  for (RefitClient* c : {t.get(), e.get()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(c->ReportDone(2, {max, 1.0, 0}, In(absl::Seconds(10)))));
    ASSERT_TRUE(c->ReportDone(2, {4096, 1.0, 0}, In(absl::Seconds(10))).ok());
  }
  EXPECT_TRUE(t->AwaitOutcome(2, In(absl::Seconds(10))).ok());
  page = testing::ScrapeMetrics(testing::MetricsPort(log));
  EXPECT_THAT(page, HasSubstr("\nrefit_round_bytes_total 8192\n")) << page;
  EXPECT_EQ(MemberBytesTotal(page), 16384) << page;
}

// The trainer's bytes so far in round 1 as refitd's status shows them.
absl::StatusOr<v1::MemberBytes> LiveOf(RefitClient& c) {
  absl::StatusOr<v1::StatusResponse> status = c.GetStatus(In(absl::Seconds(10)));
  if (!status.ok()) return status.status();
  for (const v1::RoundSummary& r : status->rounds()) {
    if (r.outcome() != "running") continue;
    for (const v1::MemberBytes& b : r.live()) {
      if (b.member_id() == c.member_id()) return b;
    }
  }
  return absl::NotFoundError("no live figure");
}

TEST(RoundFiguresTest, HeartbeatBytesAboveThePlanOrNegativeAreIgnored) {
  RefitdProcess refitd;
  std::unique_ptr<RefitClient> t, e;
  ASSERT_TRUE(StartJob(refitd, {"--plan_settle_ms=5"},
                       absl::StrCat(std::getenv("TEST_TMPDIR"), "/refitd.live.out"), &t, &e)
                  .ok());
  ASSERT_TRUE(Start(*t, 1).ok());
  ASSERT_TRUE(t->WaitForRound(In(absl::Seconds(10))).ok());
  // A figure each heartbeat (once a second): waits for two.
  auto heartbeat_bytes = [&](int64_t bytes) {
    t->SetLiveRound(1, 0, [bytes] { return bytes; });
    absl::SleepFor(absl::Milliseconds(2200));
    return LiveOf(*t);
  };
  absl::StatusOr<v1::MemberBytes> b = heartbeat_bytes(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_GT(b->planned_bytes(), 0);
  EXPECT_EQ(b->bytes(), 0);  // refused: more than the plan slice moves
  b = heartbeat_bytes(b->planned_bytes() / 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->bytes(), b->planned_bytes() / 2);
  const int64_t half = b->bytes();
  for (int64_t bad : {int64_t{-5}, int64_t{0}}) {  // negative: refused; lower: kept
    b = heartbeat_bytes(bad);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->bytes(), half) << bad;
  }
  t->SetLiveRound(0, 0, nullptr);
  EXPECT_TRUE(refitd.Alive());  // the member stays registered and refitd serves
  absl::StatusOr<v1::StatusResponse> status = t->GetStatus(In(absl::Seconds(10)));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->members_size(), 2);
}

}  // namespace
}  // namespace refit
