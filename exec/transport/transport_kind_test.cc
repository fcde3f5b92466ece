#include "exec/transport/transport_kind.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(TransportKindTest, NamesAreTheWordsUsersWrite) {
  EXPECT_EQ(TransportKindName(TransportKind::kGloo), "gloo");
  EXPECT_EQ(TransportKindName(TransportKind::kNccl), "nccl");
  EXPECT_EQ(TransportKindName(TransportKind::kPull), "pull");
}

}  // namespace
}  // namespace refit
