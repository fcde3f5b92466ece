// The delta round's prediction: wire bytes by the codec's formula, fewer
// than dense at small fractions, dense at 1; snapshot bytes and bound.
#include "cli/delta_prediction.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

TEST(DeltaPrediction, WireBytesFollowTheFraction) {
  Plan plan = testing::MakePatternPlan("2to2", 2, 2).value();
  LinkModel link;
  DeltaModel m;
  m.fraction = 0;
  auto none = PredictDelta(plan, link, m);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->wire_bytes, 32 * static_cast<int64_t>(plan.messages.size()));
  m.fraction = 0.02;
  auto small = PredictDelta(plan, link, m).value();
  m.fraction = 1;
  auto all = PredictDelta(plan, link, m).value();
  EXPECT_LT(small.wire_bytes, all.wire_bytes);  // (the pattern's messages are tiny: headers weigh)
  EXPECT_EQ(all.wire_bytes, all.dense_bytes + 32 * static_cast<int64_t>(plan.messages.size()));
  EXPECT_LT(small.predicted_seconds, all.predicted_seconds);
  m.fraction = 1.5;
  EXPECT_TRUE(absl::IsInvalidArgument(PredictDelta(plan, link, m).status()));
}

// With relays the trainer ranks snapshot only what they send; the relays
// forward it without encoding, so the prediction stands.
TEST(DeltaPrediction, RelaysKeepNoSnapshotAndRepeatTheEncoding) {
  Plan plan = testing::MakePatternPlan("relay", 2, 2).value();
  int64_t sent = 0, relayed = 0;
  for (const Message& msg : plan.messages) (msg.relay ? relayed : sent) += msg.bytes;
  ASSERT_GT(relayed, 0);
  int64_t snap = 0;
  for (int64_t b : SnapshotBytesPerRank(plan)) snap += b;
  EXPECT_LE(snap, sent);
  DeltaModel m;
  m.fraction = 0;
  auto none = PredictDelta(plan, LinkModel(), m);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->dense_bytes, sent + relayed);
  EXPECT_EQ(none->wire_bytes, 32 * static_cast<int64_t>(plan.messages.size()));
  EXPECT_GT(none->predicted_seconds, 0);
}

TEST(DeltaPrediction, SnapshotBoundNamesTheRankAndFlag) {
  Plan plan = testing::MakePatternPlan("2to2", 2, 2).value();
  std::vector<int64_t> snap = SnapshotBytesPerRank(plan);
  ASSERT_EQ(snap.size(), 2u);
  int64_t total = 0;
  for (int64_t b : snap) total += b;
  int64_t sent = 0;
  for (const Message& msg : plan.messages) sent += msg.bytes;
  EXPECT_EQ(total, sent);  // no source region goes to two engine ranks
  // Replicated engine ranks share one copy of each source region.
  Plan rep = testing::MakePatternPlan("replicated", 2, 2).value();
  int64_t rep_sent = 0, rep_snap = 0;
  for (const Message& msg : rep.messages) rep_sent += msg.bytes;
  for (int64_t b : SnapshotBytesPerRank(rep)) rep_snap += b;
  EXPECT_LT(rep_snap, rep_sent);
  EXPECT_TRUE(CheckSnapshotBound(snap, snap[1], "--max_snapshot_mib").ok() ||
              snap[0] > snap[1]);
  absl::Status s = CheckSnapshotBound(snap, std::min(snap[0], snap[1]) - 1, "--max_snapshot_mib");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "trainer rank 0")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--max_snapshot_mib")) << s;
  EXPECT_TRUE(CheckSnapshotBound(snap, 0, "--max_snapshot_mib").ok());
}

}  // namespace
}  // namespace refit
