#include "common/printable.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(PrintableTest, KeepsPlainTextAndUtf8) {
  EXPECT_EQ(Printable("host-1 \xc3\xa9t\xc3\xa9 \\x41"), "host-1 \xc3\xa9t\xc3\xa9 \\x41");
}

TEST(PrintableTest, EscapesNewlinesEscNulAndDel) {
  EXPECT_EQ(Printable(std::string("a\nb\r\t\x1b[2J\0z\x7f", 12)),
            "a\\nb\\r\\t\\x1b[2J\\x00z\\x7f");
}

TEST(PrintableTest, EscapesC1ControlsAndBrokenUtf8) {
  EXPECT_EQ(Printable("\xc2\x9b" "31m"), "\\u009b31m");
  EXPECT_EQ(Printable("x\xff\xc3"), "x\\xff\\xc3");
}

}  // namespace
}  // namespace refit
