// Whole-plan wave bytes: set from the messages, kept by every slice and
// by the wire form, refused when missing or inconsistent.
#include "plan/wave_bytes.h"

#include <map>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "plan/plan_codec.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

TEST(WaveBytesTest, EachWaveHoldsItsMessagesAndFollowsItsLane) {
  Plan plan = *testing::MakePatternPlan("pp", 2, 4);
  ASSERT_GT(plan.waves.size(), 4u);
  std::map<int32_t, int64_t> lane_end;
  for (const Wave& w : plan.waves) {
    int64_t bytes = 0;
    for (int32_t i = w.first_message; i < w.first_message + w.num_messages; ++i) {
      bytes += plan.messages[i].bytes;
    }
    EXPECT_EQ(w.plan_bytes, bytes);
    EXPECT_EQ(w.lane_offset, lane_end[w.lane]);
    lane_end[w.lane] += bytes;
  }
  EXPECT_TRUE(CheckWaveBytes(plan).ok());
}

// A rank's slice holds a subset of each wave's messages, yet every wave
// it keeps carries the whole plan's bytes and offset, on the wire too.
TEST(WaveBytesTest, SlicesCarryTheWholePlansFigures) {
  Plan plan = *testing::MakePatternPlan("pp", 2, 4);
  for (Side side : {Side::kTrainer, Side::kEngine}) {
    const int world = side == Side::kTrainer ? plan.src.world_size : plan.dst.world_size;
    for (int rank = 0; rank < world; ++rank) {
      absl::StatusOr<Plan> slice = FromProto(ToProto(ExtractSlice(plan, side, rank)));
      ASSERT_TRUE(slice.ok()) << slice.status();
      ASSERT_FALSE(slice->waves.empty());
      size_t next = 0;
      for (const Wave& w : slice->waves) {
        // The whole plan's wave of the slice's wave: the next one of the
        // same lane, stage and bytes (slices keep the waves' order).
        while (next < plan.waves.size() &&
               (plan.waves[next].lane_offset != w.lane_offset ||
                plan.waves[next].lane != w.lane)) {
          ++next;
        }
        ASSERT_LT(next, plan.waves.size()) << "rank " << rank;
        EXPECT_EQ(w.plan_bytes, plan.waves[next].plan_bytes) << "rank " << rank;
        EXPECT_EQ(w.stage, plan.waves[next].stage) << "rank " << rank;
      }
      EXPECT_TRUE(CheckWaveBytes(*slice).ok());
    }
  }
}

TEST(WaveBytesTest, APlanWithoutThemIsRefusedNamingTheWave) {
  Plan plan = *testing::MakePatternPlan("2to2", 2, 2);
  plan.waves[1].plan_bytes = 0;
  absl::Status s = CheckWaveBytes(plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "wave 1 of lane")) << s;
  EXPECT_EQ(FromProto(ToProto(plan)).status().code(), absl::StatusCode::kInvalidArgument);

  plan = *testing::MakePatternPlan("2to2", 2, 4);
  ASSERT_EQ(plan.waves[2].lane, plan.waves[0].lane);
  plan.waves[2].lane_offset = plan.waves[0].lane_offset;  // overlaps wave 0
  s = CheckWaveBytes(plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "wave 2 of lane")) << s;
}

}  // namespace
}  // namespace refit
