// DeltaPolicy: delta only to engine ranks that hold the snapshot's version.
#include "exec/delta/delta_policy.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(DeltaPolicy, NothingCommittedMeansDense) {
  DeltaPolicy p(2);
  for (const auto& m : p.Announce(true)) EXPECT_EQ(EngineDeltaModeText(m), "dense");
}

TEST(DeltaPolicy, CommittedEnginesGetDeltaAgainstTheSnapshotVersion) {
  DeltaPolicy p(3);
  p.OnCommit(4);
  for (const auto& m : p.Announce(true)) {
    EXPECT_EQ(EngineDeltaModeText(m), "delta against version 4");
  }
  for (const auto& m : p.Announce(false)) EXPECT_TRUE(m.dense);
}

TEST(DeltaPolicy, RejoinedEngineIsDenseUntilItCommits) {
  DeltaPolicy p(3);
  p.OnCommit(1);
  ASSERT_TRUE(p.OnEngineJoined(2).ok());
  auto m = p.Announce(true);
  EXPECT_FALSE(m[0].dense);
  EXPECT_TRUE(m[2].dense);
  p.OnCommit(2);
  EXPECT_FALSE(p.Announce(true)[2].dense);
  EXPECT_EQ(p.Announce(true)[2].base_version, 2);
}

TEST(DeltaPolicy, AbortTearsEveryEngineAndTheRetryRepairsThem) {
  DeltaPolicy p(2);
  p.OnCommit(1);
  p.OnAbort();
  for (const auto& m : p.Announce(true)) EXPECT_TRUE(m.dense);
  EXPECT_TRUE(p.torn(0));
  EXPECT_EQ(p.snapshot_version(), 1);
  p.OnCommit(2);
  EXPECT_FALSE(p.torn(0));
  for (const auto& m : p.Announce(true)) EXPECT_FALSE(m.dense);
}

TEST(DeltaPolicy, JoinOutsideTheWorldNamesTheRank) {
  DeltaPolicy p(2);
  absl::Status s = p.OnEngineJoined(5);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("engine rank 5"), std::string::npos) << s;
}

}  // namespace
}  // namespace refit
