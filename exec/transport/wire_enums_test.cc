#include "exec/transport/wire_enums.h"

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

TEST(WireEnumsTest, TransportRoundTrips) {
  for (TransportKind k :
       {TransportKind::kGloo, TransportKind::kNccl, TransportKind::kPull}) {
    absl::StatusOr<TransportKind> back =
        TransportFromProto(TransportToProto(k), "transport");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, k);
  }
  EXPECT_EQ(TransportToProto(TransportKind::kPull), v1::TRANSPORT_PULL);
}

TEST(WireEnumsTest, RejectsUnspecifiedAndUnknownTransports) {
  absl::StatusOr<TransportKind> k =
      TransportFromProto(v1::TRANSPORT_UNSPECIFIED, "identity.transport");
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("identity.transport"), absl::string_view::npos);
  EXPECT_FALSE(TransportFromProto(static_cast<v1::Transport>(9), "t").ok());
}

}  // namespace
}  // namespace refit
