#include "mapping/packed_scales.h"

#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

// Every byte of `lead` matrices is written by exactly one exponent or is
// padding, and the exponents land where DeepGEMM's MN-major int32 packing
// puts them.
TEST(PackedScalesTest, ExponentsAndPaddingTileTheMatrices) {
  struct Case {
    int64_t lead, rows, cols;
  };
  for (const Case& c : {Case{1, 4, 4}, Case{1, 130, 6}, Case{3, 98, 12}, Case{2, 1, 1},
                        Case{1, 7, 9}}) {
    SCOPED_TRACE(::testing::Message() << c.lead << " x " << c.rows << " x " << c.cols);
    const int64_t ar = PackedScaleRows(c.rows), words = PackedScaleWords(c.cols);
    EXPECT_EQ(ar % 4, 0);
    EXPECT_EQ(words, (c.cols + 3) / 4);
    const int64_t matrix = 4 * words * ar;
    std::vector<int> hits(c.lead * matrix, 0);
    for (int64_t l = 0; l < c.lead; ++l) {
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t k = 0; k < c.cols; ++k) {
          const int64_t at = PackedScaleOffset(r, k, ar);
          // int32 (k / 4) of row r, MN-major: word index (k / 4) * ar + r.
          EXPECT_EQ(at / 4, (k / 4) * ar + r);
          EXPECT_EQ(at % 4, k % 4);
          ++hits[l * matrix + at];
        }
      }
    }
    std::vector<ByteRange> pad = PackedScalePadding(c.lead, c.rows, c.cols);
    for (size_t i = 0; i < pad.size(); ++i) {
      if (i > 0) EXPECT_LT(pad[i - 1].end(), pad[i].begin);  // sorted, merged
      for (int64_t b = pad[i].begin; b < pad[i].end(); ++b) ++hits[b];
    }
    for (size_t b = 0; b < hits.size(); ++b) ASSERT_EQ(hits[b], 1) << "byte " << b;
  }
}

}  // namespace
}  // namespace refit
