#include "reshard/box.h"

#include <limits>

#include "gtest/gtest.h"

namespace refit {
namespace {

TEST(BoxTest, MakeValidatesRankSignAndOverflow) {
  EXPECT_TRUE(Box::Make({0, 1}, {2, 3}).ok());
  EXPECT_EQ(Box::Make({0}, {2, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto neg = Box::Make({0, 0}, {2, -1});
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("shape[1]"), std::string::npos);
  EXPECT_FALSE(
      Box::Make({std::numeric_limits<int64_t>::max()}, {1}).ok());
}

TEST(BoxTest, NumElementsDetectsOverflow) {
  Box b = Box::FromShape({1LL << 32, 1LL << 32}).value();
  EXPECT_EQ(NumElements(b).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(NumElements(Box::FromShape({3, 4, 5}).value()).value(), 60);
  EXPECT_EQ(NumElements(Box()).value(), 1);  // rank 0: a scalar
}

TEST(BoxTest, IntersectAndContains) {
  Box a = Box::Make({0, 0}, {4, 8}).value();
  Box b = Box::Make({2, 6}, {4, 4}).value();
  Box i = Intersect(a, b);
  EXPECT_EQ(i, Box::Make({2, 6}, {2, 2}).value());
  EXPECT_TRUE(Contains(a, i));
  EXPECT_TRUE(Contains(b, i));
  EXPECT_FALSE(Contains(a, b));
  Box disjoint = Intersect(a, Box::Make({5, 0}, {1, 1}).value());
  EXPECT_TRUE(IsEmpty(disjoint));
  EXPECT_TRUE(Contains(a, disjoint));
  EXPECT_EQ(i.ToString(), "[2:4, 6:8]");
}

TEST(BoxTest, WorksForHighRank) {
  std::vector<int64_t> shape(7, 2);
  Box b = Box::FromShape(shape).value();
  EXPECT_EQ(b.rank(), 7);
  EXPECT_EQ(UncheckedNumElements(b), 128);
}

}  // namespace
}  // namespace refit
