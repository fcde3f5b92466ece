#include "mapping/swizzled_scales.h"

#include <array>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

// The offset of index i of a run: its digits over the splits (innermost
// last) times their strides.
int64_t RunOffset(const SwizzleRun& run, int64_t i) {
  int64_t off = 0;
  for (auto it = run.splits.rbegin(); it != run.splits.rend(); ++it) {
    off += (i % it->size) * it->stride;
    i /= it->size;
  }
  return off;
}

// vLLM's permutation stated as an index map of the padded [mp, cp] matrix:
// (a, b, e, f, g) of [mp/128, 4, 32, cp/4, 4] goes to [a, f, e, b, g].
int64_t VllmOffset(int64_t m, int64_t c, int64_t cp) {
  const int64_t a = m / 128, b = (m % 128) / 32, e = m % 32, f = c / 4, g = c % 4;
  return (((a * (cp / 4) + f) * 32 + e) * 4 + b) * 4 + g;
}

// The quantizer kernels' own statement of the layout they write
// (cvt_quant_to_fp4_get_sf_out_offset, vLLM csrc/quantization/fp4/
// nvfp4_utils.cuh at 07c13c7): (mTile * numKTiles + kTile) << 9 |
// (m % 32) << 4 | ((m / 32) % 4) << 2 | k % 4.
int64_t KernelOffset(int64_t m, int64_t c, int64_t cp) {
  return ((m >> 7) * (cp / 4) + (c >> 2)) << 9 | (m & 31) << 4 | ((m >> 5) & 3) << 2 | (c & 3);
}

TEST(SwizzledScalesTest, OffsetIsVllmsPermutationAndTheKernelsFormula) {
  for (int64_t cp : {4, 8, 12, 64}) {
    for (int64_t m = 0; m < 384; ++m) {
      for (int64_t c = 0; c < cp; ++c) {
        ASSERT_EQ(SwizzledScaleOffset(m, c, cp), VllmOffset(m, c, cp)) << m << " " << c;
        ASSERT_EQ(SwizzledScaleOffset(m, c, cp), KernelOffset(m, c, cp)) << m << " " << c;
      }
    }
  }
}

// Random row and column ranges: the runs cover the range in order, and
// every index's offset by its run's splits is the element's offset.
TEST(SwizzledScalesTest, RunsPlaceEveryIndexWhereTheOffsetSays) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t cp = 4 * (1 + rng() % 6);
    const int64_t r0 = rng() % 400, r1 = r0 + 1 + rng() % 400;
    const int64_t c0 = rng() % cp, c1 = c0 + 1 + rng() % (cp - c0);
    int64_t next = r0;
    for (const SwizzleRun& run : SwizzleRowRuns(r0, r1, cp)) {
      ASSERT_EQ(run.at, next);
      int64_t n = 1;
      for (const DimSplit& s : run.splits) n *= s.size;
      ASSERT_EQ(n, run.n);
      for (int64_t i = 0; i < run.n; ++i) {
        ASSERT_EQ(SwizzledScaleOffset(run.at, 0, cp) + RunOffset(run, i),
                  SwizzledScaleOffset(run.at + i, 0, cp))
            << "rows [" << r0 << ", " << r1 << ") run at " << run.at << " index " << i;
      }
      next += run.n;
    }
    ASSERT_EQ(next, r1);
    next = c0;
    for (const SwizzleRun& run : SwizzleColRuns(c0, c1, 512)) {
      ASSERT_EQ(run.at, next);
      for (int64_t i = 0; i < run.n; ++i) {
        ASSERT_EQ(SwizzledScaleOffset(0, run.at, cp) + RunOffset(run, i),
                  SwizzledScaleOffset(0, run.at + i, cp));
      }
      next += run.n;
    }
    ASSERT_EQ(next, c1);
  }
}

// The padding and the elements' offsets cover every byte of the padded
// matrices exactly once.
TEST(SwizzledScalesTest, PaddingIsEveryByteNoElementHolds) {
  for (auto [lead, rows, cols] : std::vector<std::array<int64_t, 3>>{
           {1, 128, 4}, {1, 96, 6}, {2, 320, 4}, {3, 64, 10}, {1, 1, 1}, {2, 129, 5}}) {
    const int64_t mp = (rows + 127) / 128 * 128, cp = (cols + 3) / 4 * 4;
    std::vector<int> hits(lead * mp * cp, 0);
    for (int64_t l = 0; l < lead; ++l) {
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t c = 0; c < cols; ++c) ++hits[l * mp * cp + SwizzledScaleOffset(m, c, cp)];
      }
    }
    const std::vector<ByteRange> pad = SwizzledScalePadding(lead, rows, cols);
    for (size_t i = 0; i < pad.size(); ++i) {
      if (i > 0) {
        ASSERT_LT(pad[i - 1].end(), pad[i].begin);  // sorted, merged
      }
      for (int64_t b = pad[i].begin; b < pad[i].end(); ++b) ++hits[b];
    }
    for (size_t b = 0; b < hits.size(); ++b) {
      ASSERT_EQ(hits[b], 1) << lead << "x" << rows << "x" << cols << " byte " << b;
    }
  }
}

}  // namespace
}  // namespace refit
