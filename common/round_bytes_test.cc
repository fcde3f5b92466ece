#include "common/round_bytes.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(RoundBytesTest, TheRoundsBytesAreWhatTheBusiestEngineRankReceived) {
  RoundBytes b;
  b.AddEngineRank(1000);
  b.AddEngineRank(3000);
  b.AddEngineRank(2000);
  EXPECT_EQ(b.per_engine_rank, 3000);
  EXPECT_EQ(b.all_engine_ranks, 6000);
  EXPECT_EQ(b.engine_ranks, 3);
  // Over the slowest participant's 1.5 ms: 3000 bytes / 0.0015 s.
  EXPECT_DOUBLE_EQ(RoundBytesPerSecond(b, 0.0015), 2e6);
}

TEST(RoundBytesTest, NoTimeGivesNoThroughput) {
  RoundBytes b;
  b.AddEngineRank(16380000000);
  EXPECT_EQ(RoundBytesPerSecond(b, 0), 0);
  EXPECT_EQ(RoundBytesPerSecond(b, -1), 0);
  EXPECT_EQ(RoundBytesPerSecond(RoundBytes(), 1), 0);
}

TEST(RoundBytesTest, PeopleReadDecimalUnits) {
  EXPECT_EQ(HumanBytes(1), "1 byte");
  EXPECT_EQ(HumanBytes(512), "512 bytes");
  EXPECT_EQ(HumanBytes(999999), "999999 bytes");
  EXPECT_EQ(HumanBytes(12300000), "12.3 MB");
  EXPECT_EQ(HumanBytes(2384199680), "2.38 GB");
  EXPECT_EQ(HumanBytes(7630000000000), "7.63 TB");
  // The figure of docs/performance.md: 16.38 GB in 45.02 ms.
  RoundBytes b;
  b.AddEngineRank(16380000000);
  EXPECT_EQ(HumanRate(RoundBytesPerSecond(b, 0.04502)), "363.84 GB/s");
}

}  // namespace
}  // namespace refit
