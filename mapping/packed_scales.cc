#include "mapping/packed_scales.h"

namespace refit {

int64_t PackedScaleRows(int64_t rows) { return (rows + 3) / 4 * 4; }

int64_t PackedScaleWords(int64_t cols) { return (cols + 3) / 4; }

int64_t PackedScaleOffset(int64_t r, int64_t c, int64_t aligned_rows) {
  return ((c / 4) * aligned_rows + r) * 4 + c % 4;
}

std::vector<ByteRange> PackedScalePadding(int64_t lead, int64_t rows, int64_t cols) {
  const int64_t ar = PackedScaleRows(rows), words = PackedScaleWords(cols);
  const int64_t tail = cols % 4;  // exponents in a row's last int32 (0: all four)
  std::vector<ByteRange> out;
  for (int64_t l = 0; l < lead; ++l) {
    const int64_t base = l * 4 * words * ar;
    for (int64_t j = 0; j < words; ++j) {
      const bool last = j == words - 1;
      // The last int32 of every row past its exponents, then the rows past
      // `rows` (their bytes follow the last row's in memory).
      for (int64_t r = 0; last && tail != 0 && r < rows; ++r) {
        const int64_t at = base + PackedScaleOffset(r, 4 * j + tail, ar);
        if (!out.empty() && out.back().end() == at) {
          out.back().size += 4 - tail;
        } else {
          out.push_back({at, 4 - tail});
        }
      }
      if (ar > rows) {
        const int64_t at = base + PackedScaleOffset(rows, 4 * j, ar);
        if (!out.empty() && out.back().end() == at) {
          out.back().size += 4 * (ar - rows);
        } else {
          out.push_back({at, 4 * (ar - rows)});
        }
      }
    }
  }
  return out;
}

}  // namespace refit
