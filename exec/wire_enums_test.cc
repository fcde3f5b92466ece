#include "exec/wire_enums.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(WireEnumsTest, SideRoundTrips) {
  for (Side s : {Side::kTrainer, Side::kEngine}) {
    absl::StatusOr<Side> back = SideFromProto(SideToProto(s), "side");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(SideToProto(Side::kTrainer), v1::SIDE_TRAINER);
  EXPECT_EQ(SideToProto(Side::kEngine), v1::SIDE_ENGINE);
}

TEST(WireEnumsTest, RejectsUnspecifiedAndUnknownSides) {
  absl::StatusOr<Side> s = SideFromProto(v1::SIDE_UNSPECIFIED, "identity.side");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("identity.side"), absl::string_view::npos);
  EXPECT_FALSE(SideFromProto(static_cast<v1::Side>(7), "side").ok());
}

}  // namespace
}  // namespace refit
