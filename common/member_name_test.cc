#include "common/member_name.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(MemberNameTest, NamesTrainerRanksAndEngineRanksOfAReplica) {
  EXPECT_EQ(MemberName(true, "", 3), "trainer rank 3");
  EXPECT_EQ(MemberName(true, "e0", 3), "trainer rank 3");
  EXPECT_EQ(MemberName(false, "e0", 1), "engine e0 rank 1");
  EXPECT_EQ(MemberName(false, "", 7), "engine rank 7");
}

}  // namespace
}  // namespace refit
