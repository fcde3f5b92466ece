// Tests of SliceBoundsOf on a hand-made relay plan: a relay's bytes bound
// its engine sender's report, never a trainer rank's.
#include "server/slice_bounds.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

// Trainer rank 0 sends 100 bytes to engine rank 0, which forwards them to
// engine ranks 1 and 2 (relays); trainer rank 1 sends 30 bytes to engine
// rank 1. One segment per message, each writing tensor 0 of its receiver.
Plan RelayPlan() {
  Plan p;
  p.src.world_size = 2;
  p.dst.world_size = 3;
  for (int32_t r = 0; r < 3; ++r) {
    Record rec;
    rec.rank = r;
    rec.tensor = 0;
    p.dst.records.push_back(rec);
  }
  auto add = [&p](int32_t src, int32_t dst, int64_t bytes, bool relay) {
    Message m;
    m.src_rank = src;
    m.dst_rank = dst;
    m.bytes = bytes;
    m.relay = relay;
    m.first_segment = static_cast<int32_t>(p.segments.size());
    m.num_segments = 1;
    Segment g;
    g.dst_record = dst;
    g.bytes = bytes;
    p.segments.push_back(g);
    p.messages.push_back(m);
  };
  add(0, 0, 100, false);
  add(1, 1, 30, false);
  add(0, 1, 100, true);
  add(0, 2, 100, true);
  return p;
}

TEST(SliceBoundsTest, RelaysBoundTheirEngineSenderNotATrainerRank) {
  const Plan p = RelayPlan();
  std::vector<SliceBounds> t = SliceBoundsOf(p, Side::kTrainer, {0, 1});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].bytes, 100);  // its own send; engine rank 0's relays are not its
  EXPECT_EQ(t[0].messages, 1);
  EXPECT_EQ(t[1].bytes, 30);
  EXPECT_EQ(t[1].messages, 1);
  std::vector<SliceBounds> e = SliceBoundsOf(p, Side::kEngine, {0, 1, 2});
  ASSERT_EQ(e.size(), 3u);
  // Engine rank 0 receives 100 and forwards 200: it reports the larger.
  EXPECT_EQ(e[0].bytes, 200);
  EXPECT_EQ(e[0].messages, 3);
  EXPECT_EQ(e[0].digest_keys, (std::vector<std::pair<int32_t, int32_t>>{{0, 0}}));
  EXPECT_EQ(e[1].bytes, 130);
  EXPECT_EQ(e[1].messages, 2);
  EXPECT_EQ(e[1].digest_keys, (std::vector<std::pair<int32_t, int32_t>>{{1, 0}}));
  EXPECT_EQ(e[2].bytes, 100);
  EXPECT_EQ(e[2].engine_rank, 2);
}

}  // namespace
}  // namespace refit
