#include "mapping/swizzled_scales.h"

#include <algorithm>

namespace refit {

int64_t SwizzledScaleOffset(int64_t m, int64_t c, int64_t padded_cols) {
  return (m / 128) * 128 * padded_cols + (c / 4) * 512 + (m % 32) * 16 + (m % 128) / 32 * 4 +
         c % 4;
}

std::vector<ByteRange> SwizzledScalePadding(int64_t lead, int64_t rows, int64_t cols) {
  const int64_t mp = (rows + 127) / 128 * 128, cp = (cols + 3) / 4 * 4;
  std::vector<ByteRange> out;
  if (mp == rows && cp == cols) return out;
  for (int64_t l = 0; l < lead; ++l) {
    const int64_t base = l * mp * cp;
    // Rows past the last: whole runs of 4 in every column tile.
    for (int64_t m = rows; m < mp; ++m) {
      for (int64_t c = 0; c < cp; c += 4) out.push_back({base + SwizzledScaleOffset(m, c, cp), 4});
    }
    // The last column tile's columns past the last, in every row.
    for (int64_t m = 0; cp > cols && m < rows; ++m) {
      out.push_back({base + SwizzledScaleOffset(m, cols, cp), cp - cols});
    }
  }
  std::sort(out.begin(), out.end());
  std::vector<ByteRange> merged;
  for (const ByteRange& r : out) {
    if (!merged.empty() && merged.back().end() == r.begin) {
      merged.back().size += r.size;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<SwizzleRun> SwizzleRowRuns(int64_t r0, int64_t r1, int64_t padded_cols) {
  std::vector<SwizzleRun> out;
  for (int64_t r = r0; r < r1;) {
    SwizzleRun& run = out.emplace_back();
    run.at = r;
    const int64_t groups_end = r1 / 32, g = r / 32;
    if (r % 32 != 0 || groups_end == g) {
      run.n = std::min((r / 32 + 1) * 32, r1) - r;
      run.splits = {{run.n, 16}};
    } else if (g % 4 != 0 || groups_end - g < 4) {
      const int64_t h = std::min((g / 4 + 1) * 4, groups_end) - g;
      run.n = 32 * h;
      run.splits = {{h, 4}, {32, 16}};
    } else {
      const int64_t tiles = (groups_end - g) / 4;
      run.n = 128 * tiles;
      run.splits = {{tiles, 128 * padded_cols}, {4, 4}, {32, 16}};
    }
    r += run.n;
  }
  return out;
}

std::vector<SwizzleRun> SwizzleColRuns(int64_t c0, int64_t c1, int64_t tile_stride) {
  std::vector<SwizzleRun> out;
  for (int64_t c = c0; c < c1;) {
    SwizzleRun& run = out.emplace_back();
    run.at = c;
    if (c % 4 != 0 || c1 - c < 4) {
      run.n = std::min((c / 4 + 1) * 4, c1) - c;
      run.splits = {{run.n, 1}};
    } else {
      const int64_t tiles = (c1 - c) / 4;
      run.n = 4 * tiles;
      run.splits = {{tiles, tile_stride}, {4, 1}};
    }
    c += run.n;
  }
  return out;
}

}  // namespace refit
