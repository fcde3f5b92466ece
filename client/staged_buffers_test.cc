// StagedBuffers: staging starts equal to the live bytes, Apply writes the
// live buffers from it and Reset writes it from them; the budget splits
// the buffers between fast and overflow memory; host staging lists no
// changed words (the apply then copies).
#include "client/staged_buffers.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(StagedBuffersTest, StagingStartsAsLiveAndApplyWritesLive) {
  std::string a(1000, 'a'), b(24, 'b');
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto s = StagedBuffers::Create({a.data(), nullptr, b.data()}, {1000, 0, 24},
                                 HostStagingMemory(), -1, deadline);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::vector<char*>& st = (*s)->staging();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[1], nullptr);
  EXPECT_EQ(std::string(st[0], 1000), a);
  EXPECT_EQ(std::string(st[2], 24), b);
  // A round arrives in staging: the live bytes stay as they were.
  std::fill(st[0], st[0] + 1000, 'x');
  st[2][5] = 'y';
  EXPECT_EQ(a, std::string(1000, 'a'));
  absl::StatusOr<double> pause = (*s)->Apply(deadline);
  ASSERT_TRUE(pause.ok()) << pause.status();
  EXPECT_GE(*pause, 0);
  EXPECT_EQ(a, std::string(1000, 'x'));
  EXPECT_EQ(b, std::string(5, 'b') + "y" + std::string(18, 'b'));
  // An aborted round left staging ahead: Reset makes it the live bytes.
  std::fill(st[0], st[0] + 1000, 'z');
  ASSERT_TRUE((*s)->Reset(deadline).ok());
  EXPECT_EQ(std::string(st[0], 1000), std::string(1000, 'x'));
}

TEST(StagedBuffersTest, TheBudgetSplitsFastAndOverflowBytes) {
  std::string a(100, 'a'), b(50, 'b'), c(30, 'c');
  auto s = StagedBuffers::Create({a.data(), b.data(), c.data()}, {100, 50, 30},
                                 HostStagingMemory(), 130, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->fast_bytes(), 130);
  EXPECT_EQ((*s)->overflow_bytes(), 50);
}

TEST(StagedBuffersTest, HostStagingListsNoChangedWords) {
  std::string a(64, 'a');
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto s = StagedBuffers::Create({a.data()}, {64}, HostStagingMemory(), -1, deadline);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->staging()[0][3] = 'x';
  absl::StatusOr<bool> listed = (*s)->FindChanged(deadline);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_FALSE(*listed);
  EXPECT_EQ((*s)->ApplyChanged(deadline).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a, std::string(64, 'a'));  // nothing written
  ASSERT_TRUE((*s)->Apply(deadline).ok());
  EXPECT_EQ(a, "aaax" + std::string(60, 'a'));
}

TEST(StagedBuffersTest, MismatchedSizesAreRefused) {
  std::string a(10, 'a');
  auto s = StagedBuffers::Create({a.data()}, {10, 20}, HostStagingMemory(), -1,
                                 absl::Now() + absl::Seconds(10));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit
