#include "testing/reference_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "exec/convert/quantize.h"
#include "testing/reference_copy.h"
#include "testing/reference_nvfp4_vllm.h"
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
                              QuantFormat format) {
  Quantized q = ReferenceQuantize(values, shape, block, format == QuantFormat::kFp8BlockUe8m0);
  if (format == QuantFormat::kFp8BlockRequantUe8m0) {
    q = ReferenceRequantUe8m0(q, shape, block);
  }
  return q;
}

std::vector<uint8_t> ExpectedConverted(const TensorSpec& t, DType source_dtype,
                                       const TensorSpec* weight, uint64_t seed,
                                       int64_t block) {
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
  const QuantFormat format = w.format.value_or(QuantFormat::kFp8Block);
  if (format == QuantFormat::kMxfp8 || (weight != nullptr && t.dtype == DType::kU8)) {
    Quantized q = ReferenceMxfp8Quantize(v, w.shape);
    return weight != nullptr ? q.scale_bytes : q.values;
  }
  Quantized q = ReferenceQuantizeAs(v, w.shape, block, format);
  return weight != nullptr ? AsBytes(q.scales) : q.values;
}

namespace {

// The trainer's (unpacked) shape of a converted record's tensor.
std::vector<int64_t> SourceShape(const Plan& plan, const Conversion& c) {
  std::vector<int64_t> s = plan.src.tensors[c.from.tensor].shape;
  if (QuantizesTo(c, QuantFormat::kNvfp4)) s.back() *= 2;
  return s;
}

// The pattern values of weight `w` (its trainer shape `shape`) as f32.
std::vector<float> PatternValues(const std::string& w, const std::vector<int64_t>& shape,
                                 DType source_dtype, uint64_t seed) {
  const uint64_t h = NameHash(w);
  std::vector<float> v(Elements(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t word = FiniteWord(source_dtype, PatternWord(h, i, seed));
    char bytes[8];
    std::memcpy(bytes, &word, 8);
    v[i] = LoadAsF32(source_dtype, bytes);
  }
  return v;
}

// max |x| per leading index (all dims but the last two).
std::vector<float> LeadAmax(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  const int64_t slice = shape[shape.size() - 1] * shape[shape.size() - 2];
  std::vector<float> a(v.size() / slice, 0.0f);
  for (size_t i = 0; i < v.size(); ++i) a[i / slice] = std::max(a[i / slice], std::fabs(v[i]));
  return a;
}

}  // namespace

bool ExpectedNvfp4(const SideLayout& engine, const TensorSpec& t,
                   const std::map<std::string, DType>& source, uint64_t seed,
                   std::vector<uint8_t>* out) {
  std::map<std::string, int32_t> by_name;
  for (size_t i = 0; i < engine.tensors.size(); ++i) by_name[engine.tensors[i].name] = i;
  auto is_weight = [&](const std::string& n) {
    auto w = by_name.find(n);
    auto s = by_name.find(n + "_scale");
    return w != by_name.end() && s != by_name.end() &&
           engine.tensors[w->second].dtype == DType::kU8 &&
           engine.tensors[s->second].dtype == DType::kF8E4M3 && source.count(n) &&
           source.at(n) != DType::kU8;
  };
  auto strip = [&](const std::string& suffix) {
    return t.name.size() > suffix.size() &&
                   t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0
               ? t.name.substr(0, t.name.size() - suffix.size())
               : std::string();
  };
  std::string w;
  int part = 0;  // 0 codes, 1 block scales, 2 global scales
  if (t.dtype == DType::kU8 && is_weight(t.name)) {
    w = t.name;
  } else if (t.dtype == DType::kF8E4M3 && is_weight(strip("_scale"))) {
    w = strip("_scale");
    part = 1;
  } else if (t.dtype == DType::kF32 && is_weight(strip("_scale_2"))) {
    w = strip("_scale_2");
    part = 2;
  } else {
    return false;
  }
  // The weights sharing an engine buffer with w, transitively.
  std::set<int32_t> members = {by_name[w]};
  for (bool grew = true; grew;) {
    grew = false;
    std::set<int32_t> bufs;
    for (const Record& r : engine.records) {
      if (members.count(r.tensor)) bufs.insert(r.buffer);
    }
    for (const Record& r : engine.records) {
      if (bufs.count(r.buffer) && !members.count(r.tensor) &&
          is_weight(engine.tensors[r.tensor].name)) {
        members.insert(r.tensor);
        grew = true;
      }
    }
  }
  auto unpacked = [](std::vector<int64_t> s) {
    s.back() *= 2;
    return s;
  };
  const TensorSpec& ws = engine.tensors[by_name[w]];
  std::vector<float> amax;
  for (int32_t m : members) {
    const TensorSpec& ms = engine.tensors[m];
    const std::vector<float> a =
        LeadAmax(PatternValues(ms.name, unpacked(ms.shape), source.at(ms.name), seed),
                 unpacked(ms.shape));
    if (amax.empty()) amax.assign(a.size(), 0.0f);
    for (size_t k = 0; k < a.size() && k < amax.size(); ++k) amax[k] = std::max(amax[k], a[k]);
  }
  // The recipe: the parameter's global scale tensor's transform.
  bool vllm = false;
  for (int32_t m : members) {
    auto g = by_name.find(engine.tensors[m].name + "_scale_2");
    if (g != by_name.end()) vllm = engine.tensors[g->second].transform == Transform::kNvfp4Vllm;
  }
  const std::vector<float> values = PatternValues(w, unpacked(ws.shape), source.at(w), seed);
  const Quantized q = vllm ? ReferenceVllmNvfp4Quantize(values, unpacked(ws.shape), amax)
                           : ReferenceNvfp4Quantize(values, unpacked(ws.shape), amax);
  *out = part == 0 ? q.values : part == 1 ? q.scale_bytes : AsBytes(q.global_scales);
  return true;
}

absl::Status ReferenceConvert(const Plan& plan, const std::vector<uint8_t*>& src) {
  // Whole tensors, per converted source tensor, as f32.
  std::map<int32_t, std::vector<float>> whole;
  std::map<int32_t, std::vector<bool>> seen;
  for (const Conversion& c : plan.conversions) {
    const std::vector<int64_t> shape = SourceShape(plan, c);
    auto [it, fresh] = whole.try_emplace(c.from.tensor);
    if (fresh) {
      it->second.assign(Elements(shape), 0.0f);
      seen[c.from.tensor].assign(it->second.size(), false);
    }
    const int64_t es = DTypeSize(c.from_dtype);
    ForEachIndex(c.from.box, [&](const Box::Indices& g, int64_t) {
      const int64_t k = Linear(shape, g);
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
  // NVFP4: each parameter's amax per expert, over its weights.
  std::map<int32_t, std::vector<float>> param_amax;
  for (const auto& [tensor, v] : whole) {
    for (const Conversion& c : plan.conversions) {
      if (c.from.tensor != tensor || !QuantizesTo(c, QuantFormat::kNvfp4)) continue;
      const std::vector<float> a = LeadAmax(v, SourceShape(plan, c));
      std::vector<float>& p = param_amax[c.global_tensor];
      if (p.empty()) p.assign(a.size(), 0.0f);
      for (size_t k = 0; k < a.size() && k < p.size(); ++k) p[k] = std::max(p[k], a[k]);
      break;
    }
  }
  std::map<int32_t, Quantized> quantized;
  for (const Conversion& c : plan.conversions) {
    const TensorSpec& t = plan.src.tensors[c.from.tensor];
    const std::vector<float>& v = whole[c.from.tensor];
    if (QuantizesTo(c, QuantFormat::kNvfp4)) {
      const std::vector<int64_t> shape = SourceShape(plan, c);
      auto [q, fresh] = quantized.try_emplace(c.from.tensor);
      if (fresh) {
        q->second = c.recipe == Nvfp4Recipe::kVllm
                        ? ReferenceVllmNvfp4Quantize(v, shape, param_amax[c.global_tensor])
                        : ReferenceNvfp4Quantize(v, shape, param_amax[c.global_tensor]);
      }
      const int n = c.from.box.rank();
      Box::Indices po(c.from.box.origin().begin(), c.from.box.origin().end());
      Box::Indices pe(c.from.box.shape().begin(), c.from.box.shape().end());
      po[n - 1] /= 2;
      pe[n - 1] /= 2;
      ForEachIndex(Box::UncheckedMove(std::move(po), std::move(pe)),
                   [&](const Box::Indices& g, int64_t k) {
                     src[c.to_buffer][k] = q->second.values[Linear(t.shape, g)];
                   });
      std::vector<int64_t> grid = shape;
      grid.back() /= kNvfp4Block;
      if (c.scale_buffer >= 0) {
        ForEachIndex(OwnedTiles(c.from.box, c.tile), [&](const Box::Indices& g, int64_t k) {
          src[c.scale_buffer][k] = q->second.scale_bytes[Linear(grid, g)];
        });
      }
      if (c.global_buffer >= 0) {
        const Box lead = LeadingBox(c.from.box);
        const std::vector<int64_t> ls(shape.begin(), shape.end() - 2);
        float* g = reinterpret_cast<float*>(src[c.global_buffer]);
        if (lead.rank() == 0) {
          g[0] = q->second.global_scales[0];
        } else {
          ForEachIndex(lead, [&](const Box::Indices& x, int64_t k) {
            g[k] = q->second.global_scales[Linear(ls, x)];
          });
        }
      }
      continue;
    }
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
    const bool mx = c.format == QuantFormat::kMxfp8;
    if (fresh && mx) q->second = ReferenceMxfp8Quantize(v, t.shape);
    if (fresh && !mx) {
      // The packed UE8M0 row's scratch holds the float-scale quantization.
      q->second = ReferenceQuantizeAs(
          v, t.shape, c.tile.back(),
          c.swizzle == ScaleSwizzle::kPackedUe8m0 ? QuantFormat::kFp8Block : c.format);
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
