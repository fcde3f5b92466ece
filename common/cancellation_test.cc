#include "common/cancellation.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(CancellationTest, StartsNotCancelled) {
  Cancellation c;
  EXPECT_FALSE(c.cancelled());
  EXPECT_TRUE(c.status().ok());
}

TEST(CancellationTest, FirstReasonWins) {
  Cancellation c;
  EXPECT_TRUE(c.Cancel(absl::AbortedError("peer 3 died")));
  EXPECT_FALSE(c.Cancel(absl::UnavailableError("later")));
  EXPECT_TRUE(c.cancelled());
  EXPECT_EQ(c.status(), absl::AbortedError("peer 3 died"));
}

TEST(CancellationTest, OkReasonBecomesCancelledWithTheDefaultMessage) {
  Cancellation c("transport cancelled");
  EXPECT_TRUE(c.Cancel(absl::OkStatus()));
  EXPECT_EQ(c.status(), absl::CancelledError("transport cancelled"));
  EXPECT_FALSE(c.Cancel(absl::AbortedError("too late")));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kCancelled);
}

TEST(CancellationTest, RacingCancelsAgreeOnOneReason) {
  for (int trial = 0; trial < 20; ++trial) {
    Cancellation c;
    std::vector<std::thread> threads;
    std::vector<int> won(8, 0);
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&c, &won, i] {
        won[i] = c.Cancel(absl::AbortedError(absl::StrCat("reason ", i)));
      });
    }
    for (std::thread& t : threads) t.join();
    int winners = 0;
    for (int i = 0; i < 8; ++i) {
      if (!won[i]) continue;
      ++winners;
      EXPECT_EQ(c.status(), absl::AbortedError(absl::StrCat("reason ", i)));
    }
    EXPECT_EQ(winners, 1);
  }
}

}  // namespace
}  // namespace refit
