#include "common/member_secret.h"

#include <set>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(MemberSecretTest, SecretsAre128BitsAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string s = NewMemberSecret();
    EXPECT_EQ(s.size(), 32u);
    EXPECT_TRUE(seen.insert(s).second) << s;
  }
}

}  // namespace
}  // namespace refit
