#include "common/hash.h"

#include <string>

#include "gtest/gtest.h"

namespace refit {
namespace {

// FNV-1a's published 64-bit test vectors.
TEST(HashTest, Fnv1a64MatchesPublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(HashTest, Fnv1a64ContinuesAcrossPieces) {
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));
  EXPECT_EQ(Fnv1a64(std::string("a\0b", 3)), Fnv1a64("b", Fnv1a64(std::string(1, '\0'), Fnv1a64("a"))));
  EXPECT_NE(Fnv1a64(std::string("a\0b", 3)), Fnv1a64("ab"));
}

TEST(HashTest, Fnv1a64WordIsOneStepPerWord) {
  EXPECT_EQ(Fnv1a64Word(kFnv1aOffset, 'a'), Fnv1a64("a"));
  const uint64_t h = Fnv1a64Word(Fnv1a64Word(kFnv1aOffset, 1), 2);
  EXPECT_NE(h, Fnv1a64Word(Fnv1a64Word(kFnv1aOffset, 2), 1));
}

TEST(HashTest, Fnv1a64WordsTakesTheLengthEveryWordAndTheTail) {
  const std::string a(21, 'x');
  std::string b = a;
  EXPECT_EQ(Fnv1a64Words(a), Fnv1a64Words(b));
  b[3] = 'y';  // a whole word
  EXPECT_NE(Fnv1a64Words(a), Fnv1a64Words(b));
  b = a;
  b[20] = 'y';  // the tail
  EXPECT_NE(Fnv1a64Words(a), Fnv1a64Words(b));
  EXPECT_NE(Fnv1a64Words(a), Fnv1a64Words(a.substr(0, 20)));
  EXPECT_EQ(Fnv1a64Words(""), Fnv1a64Word(kFnv1aOffset, 0));
}

}  // namespace
}  // namespace refit
