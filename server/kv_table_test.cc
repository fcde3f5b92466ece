#include "server/kv_table.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(KvTableTest, SetsAndOverwritesOwnKeys) {
  KvTable kv({1000, 2000});
  ASSERT_TRUE(kv.Set("a", "k", "v1").ok());
  ASSERT_TRUE(kv.Set("a", "k", "v2").ok());
  ASSERT_NE(kv.Find("k"), nullptr);
  EXPECT_EQ(*kv.Find("k"), "v2");
  EXPECT_EQ(kv.total_bytes(), 3);
  EXPECT_EQ(kv.Find("nope"), nullptr);
}

TEST(KvTableTest, AnotherOwnersKeyIsRefused) {
  KvTable kv({1000, 2000});
  ASSERT_TRUE(kv.Set("a", "k", "v").ok());
  absl::Status s = kv.Set("b", "k", "forged");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("member a"), std::string::npos) << s;
  EXPECT_EQ(*kv.Find("k"), "v");
}

TEST(KvTableTest, QuotaPerOwnerAndInTotal) {
  KvTable kv({100, 150});
  absl::Status s = kv.Set("a", "k", std::string(200, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("member a"), std::string::npos) << s;
  EXPECT_NE(s.message().find("per-member quota of 100"), std::string::npos) << s;
  ASSERT_TRUE(kv.Set("a", "k", std::string(90, 'x')).ok());
  s = kv.Set("b", "j", std::string(90, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("total quota of 150"), std::string::npos) << s;
  // An owner's keys go when it leaves, and with them its bytes.
  kv.DropOwner("a");
  EXPECT_EQ(kv.Find("k"), nullptr);
  EXPECT_EQ(kv.total_bytes(), 0);
  EXPECT_TRUE(kv.Set("b", "j", std::string(90, 'x')).ok());
}

}  // namespace
}  // namespace refit
