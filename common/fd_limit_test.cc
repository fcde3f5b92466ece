#include "common/fd_limit.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(FdLimitTest, RaisesTheSoftLimitToTheHardOne) {
  struct rlimit lim;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  const rlim_t hard = lim.rlim_max;
  // Start from a low soft limit, as on a host with nofile=256:hard.
  lim.rlim_cur = hard < 256 ? hard : 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
  absl::StatusOr<int64_t> now = RaiseFdLimitToHard();
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(static_cast<rlim_t>(*now), hard);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(lim.rlim_cur, hard);
}

}  // namespace
}  // namespace refit
