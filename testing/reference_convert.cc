#include "testing/reference_convert.h"

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "exec/quantize.h"
#include "testing/reference_copy.h"
#include "testing/reference_quantizer.h"

namespace refit::testing {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<uint8_t> AsBytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Calls f(global index vector, row-major linear index in the box) for every
// element of `box`.
template <typename F>
void ForEachIndex(const Box& box, F&& f) {
  if (IsEmpty(box)) return;
  Box::Indices idx(box.origin().begin(), box.origin().end());
  int64_t k = 0;
  while (true) {
    f(idx, k++);
    int d = box.rank() - 1;
    while (d >= 0 && ++idx[d] == box.limit(d)) {
      idx[d] = box.origin(d);
      --d;
    }
    if (d < 0) return;
  }
}

int64_t Linear(const std::vector<int64_t>& shape, const Box::Indices& g) {
  int64_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d) k = k * shape[d] + g[d];
  return k;
}

const uint8_t* ElementPtr(const Record& r, int64_t es, const Box::Indices& g,
                          const std::vector<uint8_t*>& bufs) {
  int64_t off = 0;
  for (int d = 0; d < r.box.rank(); ++d) off += DimOffset(r.dims[d], g[d] - r.box.origin(d));
  return bufs[RecordBuffer(r, g.empty() ? 0 : g[0] - r.box.origin(0))] + r.byte_offset +
         off * es;
}

}  // namespace

uint64_t FiniteWord(DType dtype, uint64_t w) {
  switch (dtype) {
    case DType::kBF16:
      return (w & 0x7F80) == 0x7F80 ? w & ~uint64_t{0x4000} : w;
    case DType::kF16:
      return (w & 0x7C00) == 0x7C00 ? w & ~uint64_t{0x4000} : w;
    case DType::kF32:
      return (w & 0x7F800000) == 0x7F800000 ? w & ~uint64_t{0x40000000} : w;
    default:
      return w;
  }
}

Quantized ReferenceQuantizeAs(const std::vector<float>& values,
                              const std::vector<int64_t>& shape, int64_t block,
                              Transform scale_transform) {
  Quantized q = ReferenceQuantize(values, shape, block,
                                  scale_transform == Transform::kPow2Ceil);
  if (scale_transform == Transform::kUe8m0Requant) {
    q = ReferenceRequantUe8m0(q, shape, block);
  }
  return q;
}

std::vector<uint8_t> ExpectedConverted(const TensorSpec& t, DType source_dtype,
                                       const TensorSpec* weight, uint64_t seed,
                                       int64_t block, Transform scale_transform,
                                       bool mxfp8) {
  const TensorSpec& w = weight != nullptr ? *weight : t;
  const uint64_t h = NameHash(w.name);
  const int64_t n = Elements(w.shape);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t word = FiniteWord(source_dtype, PatternWord(h, i, seed));
    char bytes[8];
    std::memcpy(bytes, &word, 8);
    v[i] = LoadAsF32(source_dtype, bytes);
  }
  if (weight == nullptr && t.dtype == DType::kF32) {
    if (t.transform == Transform::kNegExp) {
      for (float& x : v) x = static_cast<float>(-std::exp(static_cast<double>(x)));
    }
    return AsBytes(v);
  }
  if (mxfp8 || (weight != nullptr && t.dtype == DType::kU8)) {
    Quantized q = ReferenceMxfp8Quantize(v, w.shape);
    return weight != nullptr ? q.scale_bytes : q.values;
  }
  Quantized q = ReferenceQuantizeAs(v, w.shape, block, scale_transform);
  return weight != nullptr ? AsBytes(q.scales) : q.values;
}

absl::Status ReferenceConvert(const Plan& plan, const std::vector<uint8_t*>& src) {
  // Whole tensors, per converted source tensor, as f32.
  std::map<int32_t, std::vector<float>> whole;
  std::map<int32_t, std::vector<bool>> seen;
  for (const Conversion& c : plan.conversions) {
    const TensorSpec& t = plan.src.tensors[c.from.tensor];
    auto [it, fresh] = whole.try_emplace(c.from.tensor);
    if (fresh) {
      it->second.assign(Elements(t.shape), 0.0f);
      seen[c.from.tensor].assign(it->second.size(), false);
    }
    const int64_t es = DTypeSize(c.from_dtype);
    ForEachIndex(c.from.box, [&](const Box::Indices& g, int64_t) {
      const int64_t k = Linear(t.shape, g);
      it->second[k] = LoadAsF32(c.from_dtype,
                                reinterpret_cast<const char*>(ElementPtr(c.from, es, g, src)));
      seen[c.from.tensor][k] = true;
    });
  }
  for (const auto& [tensor, s] : seen) {
    for (bool b : s) {
      if (!b) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reference convert: tensor ", plan.src.tensors[tensor].name,
            " is not covered by the trainer's records"));
      }
    }
  }
  std::map<int32_t, Quantized> quantized;
  for (const Conversion& c : plan.conversions) {
    const TensorSpec& t = plan.src.tensors[c.from.tensor];
    const std::vector<float>& v = whole[c.from.tensor];
    if (!IsBlockQuantized(c.kind)) {
      float* out = reinterpret_cast<float*>(src[c.to_buffer]);
      ForEachIndex(c.from.box, [&](const Box::Indices& g, int64_t k) {
        const float x = v[Linear(t.shape, g)];
        out[k] = c.kind == ConversionKind::kNegExpF32
                     ? static_cast<float>(-std::exp(static_cast<double>(x)))
                     : x;
      });
      continue;
    }
    for (float x : v) {
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("reference convert: tensor ", t.name, " holds ", x));
      }
    }
    auto [q, fresh] = quantized.try_emplace(c.from.tensor);
    const bool mx = c.kind == ConversionKind::kMxfp8;
    if (fresh && mx) q->second = ReferenceMxfp8Quantize(v, t.shape);
    if (fresh && !mx) {
      q->second = ReferenceQuantizeAs(
          v, t.shape, c.tile.back(),
          c.kind == ConversionKind::kFp8BlockUe8m0          ? Transform::kPow2Ceil
          : c.kind == ConversionKind::kFp8BlockRequantUe8m0 ? Transform::kUe8m0Requant
                                                            : Transform::kNone);
    }
    uint8_t* out = src[c.to_buffer];
    ForEachIndex(c.from.box, [&](const Box::Indices& g, int64_t k) {
      out[k] = q->second.values[Linear(t.shape, g)];
    });
    if (c.scale_buffer < 0) continue;
    std::vector<int64_t> grid(t.shape.size());
    for (size_t d = 0; d < grid.size(); ++d) grid[d] = (t.shape[d] + c.tile[d] - 1) / c.tile[d];
    float* scales = reinterpret_cast<float*>(src[c.scale_buffer]);
    uint8_t* bytes = src[c.scale_buffer];
    ForEachIndex(OwnedTiles(c.from.box, c.tile), [&](const Box::Indices& g, int64_t k) {
      if (mx) {
        bytes[k] = q->second.scale_bytes[Linear(grid, g)];
      } else {
        scales[k] = q->second.scales[Linear(grid, g)];
      }
    });
  }
  return absl::OkStatus();
}

}  // namespace refit::testing
