#include "layout/box.h"

#include <algorithm>
#include <limits>
#include <vector>

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

// Intersect and Intersects against an element-wise definition, for ranks
// 1..6 (above 4 the index vectors live on the heap).
TEST(BoxTest, IntersectMatchesPerDimensionDefinition) {
  uint64_t x = 12345;
  auto next = [&](int64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(n));
  };
  for (int iter = 0; iter < 2000; ++iter) {
    const int rank = 1 + static_cast<int>(next(6));
    std::vector<int64_t> ao, as, bo, bs;
    for (int d = 0; d < rank; ++d) {
      ao.push_back(next(10) - 3);
      as.push_back(next(6));
      bo.push_back(next(10) - 3);
      bs.push_back(next(6));
    }
    const Box a = Box::Make(ao, as).value(), b = Box::Make(bo, bs).value();
    const Box i = Intersect(a, b);
    ASSERT_EQ(i.rank(), rank);
    bool empty = false;
    for (int d = 0; d < rank; ++d) {
      const int64_t lo = std::max(ao[d], bo[d]);
      const int64_t hi = std::min(ao[d] + as[d], bo[d] + bs[d]);
      ASSERT_EQ(i.origin(d), lo) << a << " & " << b;
      ASSERT_EQ(i.shape(d), std::max<int64_t>(0, hi - lo)) << a << " & " << b;
      empty |= hi <= lo;
    }
    EXPECT_EQ(Intersects(a, b), !empty) << a << " & " << b;
    EXPECT_EQ(Intersects(a, b), !IsEmpty(i)) << a << " & " << b;
    EXPECT_TRUE(IsIntersection(a, b, i)) << a << " & " << b;
    EXPECT_TRUE(IsIntersection(b, a, i)) << a << " & " << b;
    EXPECT_FALSE(IsIntersection(a, b, a) && a != i) << a << " & " << b;
    std::vector<int64_t> io(i.origin().begin(), i.origin().end());
    std::vector<int64_t> is(i.shape().begin(), i.shape().end());
    const int d = static_cast<int>(next(rank));
    ++(next(2) == 0 ? io : is)[d];
    EXPECT_FALSE(IsIntersection(a, b, Box::Make(io, is).value())) << a << " & " << b;
  }
}

TEST(BoxTest, IsIntersectionNeedsTheSameRank) {
  const Box a = Box::Make({0, 0}, {4, 4}).value();
  EXPECT_TRUE(IsIntersection(a, a, a));
  EXPECT_FALSE(IsIntersection(a, a, Box::Make({0}, {4}).value()));
}

TEST(BoxTest, WorksForHighRank) {
  std::vector<int64_t> shape(7, 2);
  Box b = Box::FromShape(shape).value();
  EXPECT_EQ(b.rank(), 7);
  EXPECT_EQ(UncheckedNumElements(b), 128);
}

}  // namespace
}  // namespace refit
