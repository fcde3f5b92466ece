#include "exec/convert/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit {
namespace {

float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float HalfToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return BitsToF32(sign | 0x7F800000u | (m << 13));
  if (e != 0) return BitsToF32(sign | ((e + 112) << 23) | (m << 13));
  const float v = std::ldexp(static_cast<float>(m), -24);
  return sign ? -v : v;
}

// Calls fn(row_start_index_in_dense, global_coords_of_row_start, row_len)
// for every innermost row of `box`, row-major.
template <typename Fn>
void ForEachRow(const Box& box, Fn fn) {
  const int rank = box.rank();
  if (IsEmpty(box)) return;
  if (rank == 0) {
    std::vector<int64_t> none;
    fn(int64_t{0}, none, int64_t{1});
    return;
  }
  std::vector<int64_t> idx(box.origin().begin(), box.origin().end());
  const int64_t row = box.shape(rank - 1);
  int64_t pos = 0;
  while (true) {
    fn(pos, idx, row);
    pos += row;
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < box.limit(d)) break;
      idx[d] = box.origin(d);
    }
    if (d < 0) break;
  }
}

// Row-major index, inside the tile box `tiles`, of the tile holding the
// first column of the row that starts at global coords `g`; the tiles of
// the row's later columns follow it one per tile width.
int64_t RowTileBase(const Box& tiles, const std::vector<int64_t>& tile,
                    const std::vector<int64_t>& g) {
  int64_t k = 0;
  const int rank = tiles.rank();
  for (int d = 0; d < rank; ++d) {
    k = k * tiles.shape(d) + (g[d] / tile[d] - tiles.origin(d));
  }
  return k;
}

// Calls fn(first, count, tile index) for the runs of a row of n elements
// starting at global column c0 that lie in one tile each.
template <typename Fn>
void ForEachTileRun(int64_t c0, int64_t n, int64_t width, int64_t base, Fn fn) {
  int64_t i = 0;
  while (i < n) {
    const int64_t col = c0 + i;
    const int64_t len = std::min(n - i, width - col % width);
    fn(i, len, base + (col / width - c0 / width));
    i += len;
  }
}

}  // namespace

uint8_t F32ToE4M3(float f) {
  const uint32_t u = F32ToBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  float a = std::fabs(f);
  if (std::isnan(a)) return sign | 0x7F;
  if (a >= 448.0f) return sign | 0x7E;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9
    const float q = std::nearbyint(a * 512.0f);  // exact scaling; RNE
    return sign | static_cast<uint8_t>(q);
  }
  const uint32_t au = F32ToBits(a);
  const int32_t e = static_cast<int32_t>((au >> 23) & 0xFF) - 127;
  const uint32_t mant = au & 0x7FFFFF;
  uint32_t keep = mant >> 20;
  const uint32_t rem = mant & 0xFFFFF;
  uint32_t v = (static_cast<uint32_t>(e + 7) << 3) | keep;
  if (rem > 0x80000 || (rem == 0x80000 && (keep & 1))) ++v;  // may carry
  if (v > 0x7E) v = 0x7E;
  return sign | static_cast<uint8_t>(v);
}

float E4M3ToF32(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xF, m = b & 0x7;
  if (e == 0xF && m == 0x7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}

float LoadAsF32(DType dtype, const char* p) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BitsToF32(static_cast<uint32_t>(h) << 16);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToF32(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

ScaleMode ScaleModeOf(QuantFormat f, ScaleSwizzle s) {
  switch (f) {
    case QuantFormat::kFp8BlockUe8m0:
      return ScaleMode::kPow2;
    case QuantFormat::kFp8BlockRequantUe8m0:
      return s == ScaleSwizzle::kPackedUe8m0 ? ScaleMode::kPow2RequantE8m0
                                             : ScaleMode::kPow2Requant;
    case QuantFormat::kMxfp8:
      return ScaleMode::kE8m0;
    default:
      return ScaleMode::kFloat;
  }
}

namespace {

float FloatScale(float amax) { return std::fmax(amax, 1e-4f) / 448.0f; }

float Pow2Ceil(float scale) {
  int e = 0;
  const float m = std::frexp(scale, &e);  // scale = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? scale : std::ldexp(1.0f, e);
}

float Quantized(float x, float inv) {
  return E4M3ToF32(F32ToE4M3(std::fmin(std::fmax(x * inv, -448.0f), 448.0f)));
}

}  // namespace

uint8_t E8m0ScaleByte(float amax) {
  // a / 448 = m * 2^x with m in [0.5, 1): ceil(log2) = x - 1 when m = 0.5,
  // else x.
  const float r = std::fmax(amax, std::ldexp(1.0f, -126)) / 448.0f;
  int x = 0;
  const float m = std::frexp(r, &x);
  const int e = (m == 0.5f ? x - 1 : x) + 127;
  return static_cast<uint8_t>(std::min(254, std::max(0, e)));
}

int64_t ScaleElementSize(ScaleMode mode) {
  return mode == ScaleMode::kE8m0 || mode == ScaleMode::kPow2RequantE8m0 ? 1 : 4;
}

float BlockScale(float amax, ScaleMode mode) {
  if (mode == ScaleMode::kE8m0) return std::ldexp(1.0f, E8m0ScaleByte(amax) - 127);
  const float s1 = FloatScale(amax);
  switch (mode) {
    case ScaleMode::kFloat:
      return s1;
    case ScaleMode::kPow2:
      return Pow2Ceil(s1);
    case ScaleMode::kPow2Requant:
    case ScaleMode::kPow2RequantE8m0: {
      const float amax2 = Quantized(amax, 1.0f / s1) * s1;
      return Pow2Ceil(FloatScale(amax2));
    }
    case ScaleMode::kE8m0:
      break;
  }
  return s1;
}

absl::StatusOr<std::vector<float>> TileAmaxHost(const HostDenseBox& in,
                                                const std::vector<int64_t>& tile) {
  const Box tiles = IntersectingTiles(in.box, tile);
  std::vector<float> amax(UncheckedNumElements(tiles), 0.0f);
  const int64_t es = DTypeSize(in.dtype);
  const int last = in.box.rank() - 1;
  absl::Status bad;
  ForEachRow(in.box, [&](int64_t pos, const std::vector<int64_t>& g, int64_t n) {
    if (!bad.ok()) return;
    const int64_t base = RowTileBase(tiles, tile, g);
    ForEachTileRun(g[last], n, tile[last], base, [&](int64_t i0, int64_t len, int64_t k) {
      float a = amax[k];
      for (int64_t i = i0; i < i0 + len; ++i) {
        const float v = LoadAsF32(in.dtype, in.data + (pos + i) * es);
        if (!std::isfinite(v) && bad.ok()) {
          std::vector<int64_t> at = g;
          at[last] = g[last] + i;
          bad = absl::InvalidArgumentError(absl::StrCat(
              "non-finite value ", v, " at [", absl::StrJoin(at, ", "), "]"));
        }
        a = std::fmax(a, std::fabs(v));
      }
      amax[k] = a;
    });
  });
  if (!bad.ok()) return bad;
  return amax;
}

void QuantizeHost(const HostDenseBox& in, const std::vector<int64_t>& tile,
                  absl::Span<const float> amax, ScaleMode mode, uint8_t* out,
                  void* scales) {
  const Box tiles = IntersectingTiles(in.box, tile);
  // inv: of the scale the codes are made with; requant: the first (float)
  // scale s1, and inv2 = 1 / s2 of the second. kE8m0: x * (1 / 2^k) is
  // vLLM's x / 2^k bit for bit (1 / 2^k is exact; both round x * 2^-k once).
  std::vector<float> scale(amax.size()), inv(amax.size()), s1(amax.size()),
      inv2(amax.size());
  const bool requant =
      mode == ScaleMode::kPow2Requant || mode == ScaleMode::kPow2RequantE8m0;
  for (size_t k = 0; k < amax.size(); ++k) {
    scale[k] = BlockScale(amax[k], mode);
    s1[k] = requant ? BlockScale(amax[k], ScaleMode::kFloat) : scale[k];
    inv[k] = 1.0f / s1[k];
    inv2[k] = 1.0f / scale[k];
  }
  const int64_t es = DTypeSize(in.dtype);
  const int last = in.box.rank() - 1;
  ForEachRow(in.box, [&](int64_t pos, const std::vector<int64_t>& g, int64_t n) {
    if (out == nullptr) return;  // scales only
    const int64_t base = RowTileBase(tiles, tile, g);
    ForEachTileRun(g[last], n, tile[last], base, [&](int64_t i0, int64_t len, int64_t k) {
      const float f = inv[k];
      for (int64_t i = i0; i < i0 + len; ++i) {
        float x = LoadAsF32(in.dtype, in.data + (pos + i) * es) * f;
        if (requant) x = Quantized(x, 1.0f) * s1[k] * inv2[k];
        out[pos + i] = F32ToE4M3(std::fmin(std::fmax(x, -448.0f), 448.0f));
      }
    });
  });
  if (scales == nullptr) return;
  const Box owned = OwnedTiles(in.box, tile);
  ForEachRow(owned, [&](int64_t pos, const std::vector<int64_t>& g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t k = 0;
      for (int d = 0; d < owned.rank(); ++d) {
        const int64_t c = (d == last ? g[d] + i : g[d]) - tiles.origin(d);
        k = k * tiles.shape(d) + c;
      }
      if (mode == ScaleMode::kE8m0) {
        static_cast<uint8_t*>(scales)[pos + i] = E8m0ScaleByte(amax[k]);
      } else if (mode == ScaleMode::kPow2RequantE8m0) {
        uint32_t bits;
        std::memcpy(&bits, &scale[k], 4);
        static_cast<uint8_t*>(scales)[pos + i] = static_cast<uint8_t>(bits >> 23);
      } else {
        static_cast<float*>(scales)[pos + i] = scale[k];
      }
    }
  });
}

void CastF32Host(DType dtype, const char* in, int64_t n, bool neg_exp,
                 float* out) {
  const int64_t es = DTypeSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    const float v = LoadAsF32(dtype, in + i * es);
    out[i] = neg_exp ? static_cast<float>(-std::exp(static_cast<double>(v))) : v;
  }
}

}  // namespace refit
