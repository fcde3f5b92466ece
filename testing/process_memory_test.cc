#include "testing/process_memory.h"

#include <vector>

#include "gtest/gtest.h"

namespace refit::testing {
namespace {

TEST(ProcessMemoryTest, SeesMemoryThisProcessTouches) {
  const ProcessMemory before = ReadProcessMemory();
  ASSERT_GT(before.rss_mib, 0);
  ASSERT_GE(before.hwm_mib, before.rss_mib);
  std::vector<char> touched(64 << 20, 1);
  const ProcessMemory after = ReadProcessMemory();
  EXPECT_GT(after.rss_mib, before.rss_mib + 32) << touched[12345];
  EXPECT_GE(after.hwm_mib, after.rss_mib);
}

}  // namespace
}  // namespace refit::testing
