#include "tools/refit_demo/round_progress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time t0 = absl::FromUnixSeconds(1000);

v1::RoundSummary* Round(v1::StatusResponse& r, int64_t v, const std::string& outcome,
                        double seconds) {
  v1::RoundSummary* s = r.add_rounds();
  s->set_version(v);
  s->set_outcome(outcome);
  s->set_seconds(seconds);
  return s;
}

TEST(RoundProgressTest, ASlowRoundGetsALineEverySecondAndAFinalLine) {
  RoundProgress p;
  v1::StatusResponse fast;
  Round(fast, 1, "running", 0.4)->add_waiting("e");
  EXPECT_THAT(p.Update(fast, t0), IsEmpty());  // under a second: quiet

  v1::StatusResponse slow;
  v1::RoundSummary* s = Round(slow, 1, "running", 1.9);
  s->add_reported("t");
  s->add_waiting("e");
  s->set_bytes(12300000000);
  s->set_engine_ranks(1);
  EXPECT_THAT(p.Update(slow, t0 + absl::Milliseconds(1500)),
              ElementsAre("round 1: 1/2 members reported, 1.9 s, 12.30 GB per engine rank "
                          "so far"));
  EXPECT_THAT(p.Update(slow, t0 + absl::Milliseconds(2000)), IsEmpty());  // < 1 s later
  s->set_seconds(2.9);
  EXPECT_EQ(p.Update(slow, t0 + absl::Milliseconds(2600)).size(), 1u);

  v1::StatusResponse done;
  v1::RoundSummary* c = Round(done, 1, "committed", 3.25);
  c->set_duration_seconds(3.5);
  c->set_bytes(12300000);
  c->set_engine_ranks(1);
  c->set_bytes_per_second(12300000 / 3.25);
  c->set_peak_staging_bytes(64000000);
  c->set_peak_staging_member("engine/demo/e0/1");
  EXPECT_THAT(p.Update(done, t0 + absl::Seconds(4)),
              ElementsAre("round 1 committed in 3.500 s (slowest member 3.250 s): 12.3 MB "
                          "per engine rank (1 engine rank), 0.00 GB/s, peak staging 64.0 MB "
                          "(engine/demo/e0/1)"));
  EXPECT_THAT(p.Update(done, t0 + absl::Seconds(5)), IsEmpty());  // once
}

TEST(RoundProgressTest, RoundsThatEndedBetweenPollsEachGetTheirFinalLine) {
  RoundProgress p;
  v1::StatusResponse r;
  Round(r, 1, "committed", 0.01);
  Round(r, 2, "aborted", 0.5)->set_reason("member engine e0 rank 1 failed: boom");
  Round(r, 3, "running", 0.1);
  std::vector<std::string> lines = p.Update(r, t0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], ::testing::StartsWith("round 1 committed in 0.000 s (slowest member "
                                              "0.010 s): 0 bytes per engine rank"));
  EXPECT_EQ(lines[1], "round 2 aborted after 0.500 s: member engine e0 rank 1 failed: boom");
}

}  // namespace
}  // namespace refit
