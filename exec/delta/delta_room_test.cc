#include "exec/delta/delta_room.h"

#include <random>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(DeltaRoomTest, ALaneRoomIsTheLaneShareOrHalfOfItWithRelays) {
  PlannerOptions o;
  o.staging_budget_bytes = 1 << 20;
  o.num_lanes = 4;
  EXPECT_EQ(DeltaLaneRoom(o), 1 << 18);
  o.relay = true;
  EXPECT_EQ(DeltaLaneRoom(o), 1 << 17);
}

TEST(DeltaRoomTest, APairsBoundFollowsThePlannersWaveCaps) {
  PlannerOptions o;
  o.staging_budget_bytes = 1 << 20;
  o.num_lanes = 2;
  // A window of waves: the window.
  EXPECT_EQ(PairBound(o, 4096, 1 << 22, 100, 100), 4096);
  // One wave: the lane share, or the wave's bytes when fewer.
  EXPECT_EQ(PairBound(o, 0, 1 << 22, 100, 100), 1 << 19);
  EXPECT_EQ(PairBound(o, 0, 1000, 100, 100), 1000);
  // Waves capped below the share: a pair with a message past the cap is
  // alone in its wave.
  o.max_wave_bytes = 1 << 10;
  EXPECT_EQ(PairBound(o, 0, 1 << 22, 100, 100), 1 << 10);
  EXPECT_EQ(PairBound(o, 0, 1 << 22, 5000, 5000), 5000);
}

// Whatever its peers' share of a batch, a receiver's packed messages and
// the encodings its peers may send it fit its room (a check over random
// batches: peers, messages of multiples of 8 bytes, packed or not).
TEST(DeltaRoomTest, AReceiversPeersNeverSendMoreThanItsRoomHolds) {
  std::mt19937_64 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t room = 1024 + static_cast<int64_t>(rng() % 100000);
    const int peers = 1 + static_cast<int>(rng() % 4);
    int64_t total = 0, need = 0;
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (bytes, packed bytes)
    for (int p = 0; p < peers; ++p) {
      int64_t bytes = 0, staged = 0;
      const int messages = 1 + static_cast<int>(rng() % 5);
      for (int m = 0; m < messages; ++m) {
        const int64_t b = 8 * (1 + static_cast<int64_t>(rng() % (room / 200)));
        bytes += b;
        if (rng() % 2) staged += TightStagingBytes(b);
      }
      pairs.push_back({bytes, staged});
      total += bytes;
    }
    // At least the rank's bytes; past the room: none.
    const int64_t bound = total + static_cast<int64_t>(rng() % 1000);
    for (const auto& [bytes, staged] : pairs) {
      need += staged + PairCodedCap(room, bound, bytes, staged);
    }
    // Whatever fits the room dense (the planner keeps packed bytes within it).
    int64_t staged_all = 0;
    for (const auto& [bytes, staged] : pairs) staged_all += staged;
    if (bound > room) {
      EXPECT_EQ(need, staged_all) << "trial " << trial;
      continue;
    }
    ++checked;
    EXPECT_LE(need, room) << "trial " << trial;
  }
  EXPECT_GT(checked, 1000);
}

TEST(DeltaRoomTest, APairInAHalfFullBatchMayEncodeNearlyAllItsBytes) {
  // A batch bound at half the room: the pair's encodings may take about
  // as many bytes as its messages, packed or not (the room keeps 16 spare).
  EXPECT_GE(PairCodedCap(1 << 20, 1 << 19, 1 << 18, 1 << 18), (1 << 18) - 16);
  EXPECT_GE(PairCodedCap(1 << 20, 1 << 19, 1 << 18, 0), (1 << 19) - 16);
  EXPECT_EQ(PairCodedCap(1 << 20, 0, 1 << 18, 0), 0);
  EXPECT_EQ(PairCodedCap(1 << 20, 1 << 20, 1 << 18, 1 << 18), 0);  // full: none left
}

TEST(DeltaRoomTest, APairAloneInItsBatchGetsTheRoomItsStagingLeaves) {
  EXPECT_EQ(PairCodedCap(1 << 20, 3 << 19, 3 << 19, 1 << 19), (1 << 19) - 16);
  EXPECT_EQ(PairCodedCap(1 << 20, 1 << 18, 1 << 18, 0), (1 << 20) - 16);
  EXPECT_EQ(PairCodedCap(1 << 20, 3 << 19, 3 << 19, 1 << 20), 0);
  // Not alone, its bound past the room: none.
  EXPECT_EQ(PairCodedCap(1 << 20, 3 << 19, 1 << 19, 0), 0);
}

}  // namespace
}  // namespace refit
