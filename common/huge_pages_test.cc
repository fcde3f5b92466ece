#include "common/huge_pages.h"

#include <stdlib.h>

#include <string>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(HugePagesTest, AddsTheTunableOnce) {
  EXPECT_EQ(TunablesWithHugePages(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  // A value already chosen (by the user, or by the first exec) is kept.
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.hugetlb=0"), "");
  EXPECT_EQ(TunablesWithHugePages("a.b=1:glibc.malloc.hugetlb=2"), "");
  // A longer name that merely starts like it is another tunable.
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.hugetlbx=1"),
            "glibc.malloc.hugetlbx=1:glibc.malloc.hugetlb=1");
}

// main() below re-executed this test through ReexecWithHugePages.
TEST(HugePagesTest, ProgramRunsWithTheTunable) {
  const char* opt = getenv("REFIT_HUGE_PAGES");
  if (!ThpModeIsMadvise() || (opt != nullptr && std::string(opt) == "0")) {
    GTEST_SKIP() << "transparent huge pages not in madvise mode, or opted out";
  }
  const char* t = getenv("GLIBC_TUNABLES");
  ASSERT_NE(t, nullptr);
  EXPECT_NE(std::string(t).find("glibc.malloc.hugetlb="), std::string::npos) << t;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  refit::ReexecWithHugePages(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
