#include "layout/side.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(SideTest, NamesParseBack) {
  for (Side s : {Side::kTrainer, Side::kEngine}) {
    absl::StatusOr<Side> back = ParseSide(SideName(s));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(SideName(Side::kTrainer), "trainer");
  EXPECT_EQ(SideName(Side::kEngine), "engine");
}

TEST(SideTest, RejectsOtherNames) {
  absl::StatusOr<Side> s = ParseSide("Trainer");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("Trainer"), absl::string_view::npos);
  EXPECT_FALSE(ParseSide("").ok());
}

}  // namespace
}  // namespace refit
