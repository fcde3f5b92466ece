// CutPieces: a source tensor's pieces cut further at given positions.
#include "plan/internal/pieces.h"

#include <vector>

#include "gtest/gtest.h"
#include "layout/box.h"

namespace refit {
namespace internal_plan {
namespace {

Box B(std::vector<int64_t> origin, std::vector<int64_t> shape) {
  return *Box::Make(origin, shape);
}

TensorPieces TwoPieces() {
  TensorPieces tp;
  tp.pieces.push_back(Piece{B({0, 0}, {8, 4}), {3, 5}, {0, 1}});
  tp.pieces.push_back(Piece{B({8, 0}, {8, 4}), {4}, {2}});
  tp.max_extent0 = 8;
  return tp;
}

TEST(CutPiecesTest, CutsOnlyInsideEachPieceAndKeepsItsReplicas) {
  TensorPieces tp = TwoPieces();
  // Dim 0 at 2, 8 (a piece boundary already) and 12; dim 1 at 0 and 4
  // (the ends: no cut) and 3.
  ASSERT_TRUE(CutPieces({{2, 8, 12}, {0, 3, 4}}, &tp));
  const std::vector<Box> want = {B({0, 0}, {2, 3}),  B({0, 3}, {2, 1}),  B({2, 0}, {6, 3}),
                                 B({2, 3}, {6, 1}),  B({8, 0}, {4, 3}),  B({8, 3}, {4, 1}),
                                 B({12, 0}, {4, 3}), B({12, 3}, {4, 1})};
  ASSERT_EQ(tp.pieces.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(tp.pieces[i].box, want[i]) << i;
    const bool first = i < 4;
    EXPECT_EQ(tp.pieces[i].replicas, first ? std::vector<int32_t>({3, 5})
                                           : std::vector<int32_t>({4}));
    EXPECT_EQ(tp.pieces[i].ranks, first ? std::vector<int32_t>({0, 1})
                                        : std::vector<int32_t>({2}));
  }
  EXPECT_EQ(tp.max_extent0, 6);
  // Every element is in exactly one piece still.
  int64_t elements = 0;
  for (const Piece& p : tp.pieces) elements += UncheckedNumElements(p.box);
  EXPECT_EQ(elements, 16 * 4);
}

TEST(CutPiecesTest, NoCutInsideLeavesThePiecesAlone) {
  TensorPieces tp = TwoPieces();
  ASSERT_TRUE(CutPieces({{0, 8, 16}}, &tp));
  ASSERT_EQ(tp.pieces.size(), 2u);
  EXPECT_EQ(tp.pieces[0].box, B({0, 0}, {8, 4}));
  EXPECT_EQ(tp.max_extent0, 8);
}

TEST(CutPiecesTest, TooManyPiecesLeavesThemAsTheyAre) {
  TensorPieces tp;
  tp.pieces.push_back(Piece{B({0, 0}, {4096, 4096}), {0}, {0}});
  std::vector<int64_t> every(4095);
  for (int64_t i = 0; i < 4095; ++i) every[i] = i + 1;
  EXPECT_FALSE(CutPieces({every, every}, &tp));  // 2^24 cells
  ASSERT_EQ(tp.pieces.size(), 1u);
  EXPECT_EQ(tp.pieces[0].box, B({0, 0}, {4096, 4096}));
}

}  // namespace
}  // namespace internal_plan
}  // namespace refit
