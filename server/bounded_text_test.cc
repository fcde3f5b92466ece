#include "server/bounded_text.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(BoundedTextTest, ShortTextIsKept) { EXPECT_EQ(BoundedText("abc", 3), "abc"); }

TEST(BoundedTextTest, LongTextIsCutWithANote) {
  EXPECT_EQ(BoundedText(std::string(10, 'x'), 4), "xxxx ... [6 bytes cut]");
  const std::string big(20 << 20, 'r');
  EXPECT_LE(BoundedText(big).size(), kMaxReasonBytes + 32);
}

TEST(BoundedTextTest, CutsAtACharacterBoundary) {
  // "é" is two bytes: a cut inside it keeps neither byte.
  EXPECT_EQ(BoundedText("a\xC3\xA9z", 2), "a ... [3 bytes cut]");
}

TEST(BoundedTextTest, StatusKeepsItsCode) {
  absl::Status s = BoundedStatus(absl::InvalidArgumentError(std::string(9000, 'e')));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LE(s.message().size(), kMaxReasonBytes + 32);
}

}  // namespace
}  // namespace refit
