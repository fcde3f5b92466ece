// PlaceMessage on the pattern plans: a contiguous side is its buffer
// range, any other side copies exactly its message's bytes; a buffer the
// rank did not give is named.
#include "exec/program/message_place.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

TEST(MessagePlaceTest, ContiguousSidesLieInTheirBufferOthersCopyTheMessage) {
  for (const std::string& name : {"2to2", "qkv", "experts"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Plan> plan = testing::MakePatternPlan(name);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int direct = 0, copied = 0;
    for (const Message& m : plan->messages) {
      for (bool sends : {true, false}) {
        const SideLayout& layout = sends ? plan->src : plan->dst;
        const int32_t rank = sends ? m.src_rank : m.dst_rank;
        std::vector<std::vector<char>> bufs = testing::AllocateRankBuffers(layout, rank, 0);
        std::vector<char*> ptrs = testing::Pointers(bufs);
        absl::StatusOr<MessagePlace> place =
            PlaceMessage(*plan, m, sends, layout, ptrs, "rank under test");
        ASSERT_TRUE(place.ok()) << place.status();
        if (sends ? m.src_contiguous : m.dst_contiguous) {
          const int32_t b = sends ? m.src_buffer : m.dst_buffer;
          EXPECT_EQ(place->direct, ptrs[b] + (sends ? m.src_offset : m.dst_offset));
          EXPECT_TRUE(place->tasks.empty());
          ++direct;
        } else {
          EXPECT_EQ(place->direct, nullptr);
          EXPECT_EQ(TaskBytes(place->tasks), m.bytes);
          ++copied;
        }
      }
    }
    EXPECT_GT(direct + copied, 0);
  }
}

TEST(MessagePlaceTest, AMissingBufferIsNamedWithWho) {
  absl::StatusOr<Plan> plan = testing::MakePatternPlan("2to2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Message& m = plan->messages.front();
  std::vector<char*> none(plan->dst.buffers.size(), nullptr);
  absl::StatusOr<MessagePlace> place =
      PlaceMessage(*plan, m, false, plan->dst, none, "engine rank 1");
  ASSERT_TRUE(absl::IsInvalidArgument(place.status())) << place.status();
  EXPECT_TRUE(absl::StartsWith(place.status().message(), "engine rank 1: buffer ")) << place.status();
  EXPECT_TRUE(absl::StrContains(place.status().message(), "is not registered")) << place.status();
  bool named = false;
  for (const BufferSpec& b : plan->dst.buffers) {
    named = named || absl::StrContains(place.status().message(), b.name);
  }
  EXPECT_TRUE(named) << place.status();
}

}  // namespace
}  // namespace refit
