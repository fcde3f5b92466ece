#include "client/round_text.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(RoundTextTest, ACommittedRoundSaysItsBytesPerEngineRankAndItsThroughput) {
  v1::RoundSummary s;
  s.set_version(3);
  s.set_outcome("committed");
  s.set_duration_seconds(0.5);
  s.set_seconds(0.04502);
  s.set_bytes(16380000000);
  s.set_engine_ranks(2);
  s.set_bytes_per_second(16380000000 / 0.04502);
  s.set_peak_staging_bytes(64000000);
  s.set_peak_staging_member("engine/demo/e0/1");
  EXPECT_EQ(FinishedRoundLine(s),
            "round 3 committed in 0.500 s (slowest member 0.045 s): 16.38 GB per engine "
            "rank (2 engine ranks), 363.84 GB/s, peak staging 64.0 MB (engine/demo/e0/1)");
  s.set_engine_ranks(1);
  EXPECT_NE(FinishedRoundLine(s).find("(1 engine rank)"), std::string::npos);
}

TEST(RoundTextTest, ARoundWithStagedEnginesGivesTheLongestPause) {
  v1::RoundSummary s;
  s.set_version(3);
  s.set_outcome("committed");
  s.set_duration_seconds(2.0);
  s.set_pause_seconds(0.1234);
  s.set_pause_member("engine/demo/e0/1");
  const std::string line = FinishedRoundLine(s);
  EXPECT_NE(line.find(", engine pause 123.4 ms (engine/demo/e0/1), 0.062 of the round"),
            std::string::npos)
      << line;
  s.clear_pause_member();
  EXPECT_EQ(FinishedRoundLine(s).find("pause"), std::string::npos);
}

TEST(RoundTextTest, AnAbortedRoundSaysWhy) {
  v1::RoundSummary s;
  s.set_version(2);
  s.set_outcome("aborted");
  s.set_seconds(1.25);
  s.set_reason("member engine e0 rank 0 failed: NCCL timeout");
  EXPECT_EQ(FinishedRoundLine(s),
            "round 2 aborted after 1.250 s: member engine e0 rank 0 failed: NCCL timeout");
}

TEST(RoundTextTest, CountsAreSingularForOne) {
  EXPECT_EQ(Counted(1, "member"), "1 member");
  EXPECT_EQ(Counted(0, "member"), "0 members");
  EXPECT_EQ(Counted(4, "member"), "4 members");
}

TEST(RoundTextTest, ARoundInFlightShowsBytesOnceAnEngineRankReported) {
  v1::RoundSummary s;
  s.set_outcome("running");
  EXPECT_EQ(RunningRoundBytes(s), "");
  s.set_engine_ranks(1);
  s.set_bytes(816400000);
  EXPECT_EQ(RunningRoundBytes(s), ", 816.4 MB per engine rank so far");
}

TEST(RoundTextTest, ACommittedRoundSaysWhyItRanDense) {
  v1::RoundSummary s;
  s.set_version(4);
  s.set_outcome("committed");
  s.set_delta_note("delta rounds run dense: the host delta codec (0.20 GB/s a member) ...");
  EXPECT_TRUE(absl::EndsWith(FinishedRoundLine(s),
                             "; delta rounds run dense: the host delta codec (0.20 GB/s a "
                             "member) ..."))
      << FinishedRoundLine(s);
}

}  // namespace
}  // namespace refit
