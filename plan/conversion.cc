#include "plan/conversion.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace refit {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One row of the format table: what a destination dtype asks of a source
// dtype.
struct FormatRow {
  DType to;
  Transform transform;   // of the destination tensor
  bool block;            // FP8 block scales
};

bool IsFloatSource(DType d) {
  return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32;
}

absl::StatusOr<ConversionKind> KindFor(const TensorSpec& s, const TensorSpec& d,
                                       const TensorSpec* scale) {
  if (!IsFloatSource(s.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", d.name, ": the engine holds ", DTypeName(d.dtype),
        " but the trainer ", DTypeName(s.dtype), ", which refit converts from "
        "bf16, f16 or f32 only"));
  }
  if (d.dtype == DType::kF32 && d.transform == Transform::kNegExp) {
    return ConversionKind::kNegExpF32;
  }
  if (d.dtype == DType::kF32 && d.transform == Transform::kNone) {
    return ConversionKind::kCastF32;
  }
  if (d.dtype == DType::kF8E4M3 && d.transform == Transform::kNone &&
      scale != nullptr && scale->dtype == DType::kU8) {
    return ConversionKind::kMxfp8;
  }
  if (d.dtype == DType::kF8E4M3 && d.transform == Transform::kNone) {
    if (scale == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", d.name, ": the engine holds f8e4m3 without a ",
          ScaleTensorName(d.name), " tensor; refit quantizes only to FP8 "
          "with block scales"));
    }
    switch (scale->transform) {
      case Transform::kPow2Ceil:
        return ConversionKind::kFp8BlockUe8m0;
      case Transform::kUe8m0Requant:
        return ConversionKind::kFp8BlockRequantUe8m0;
      default:
        return ConversionKind::kFp8Block;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor ", d.name, ": the engine holds ", DTypeName(d.dtype),
      d.transform != Transform::kNone
          ? absl::StrCat(" (", TransformName(d.transform), ")")
          : std::string(),
      " and the trainer ", DTypeName(s.dtype),
      "; refit converts bf16/f16/f32 to f32, -exp f32 or FP8 blocks only",
      d.transform == Transform::kUe8m0Requant
          ? " (kernel=deepgemm quantizes and requantizes the trainer's "
            "bf16/f16/f32 weights; a trainer holding FP8 is not requantized)"
          : ""));
}

// Tiles entirely inside `box` along each dim, given the tensor's extents.
Box WholeTiles(const Box& box, const std::vector<int64_t>& tile,
               absl::Span<const int64_t> shape) {
  Box::Indices o(box.rank()), e(box.rank());
  for (int d = 0; d < box.rank(); ++d) {
    const int64_t lo = CeilDiv(box.origin(d), tile[d]);
    const int64_t hi = box.limit(d) == shape[d] ? CeilDiv(shape[d], tile[d])
                                                : box.limit(d) / tile[d];
    o[d] = lo;
    e[d] = std::max<int64_t>(0, hi - lo);
  }
  return Box::UncheckedMove(std::move(o), std::move(e));
}

// outer \ inner (inner inside outer or empty) as at most 2 * rank boxes.
std::vector<Box> Difference(const Box& outer, const Box& inner) {
  if (IsEmpty(inner)) return {outer};
  std::vector<Box> out;
  Box::Indices o(outer.origin().begin(), outer.origin().end());
  Box::Indices e(outer.shape().begin(), outer.shape().end());
  for (int d = 0; d < outer.rank(); ++d) {
    if (inner.origin(d) > o[d]) {
      Box::Indices lo_e = e;
      lo_e[d] = inner.origin(d) - o[d];
      out.push_back(Box::Unchecked(o, lo_e));
    }
    if (inner.limit(d) < o[d] + e[d]) {
      Box::Indices hi_o = o, hi_e = e;
      hi_o[d] = inner.limit(d);
      hi_e[d] = o[d] + e[d] - inner.limit(d);
      out.push_back(Box::Unchecked(hi_o, hi_e));
    }
    o[d] = inner.origin(d);
    e[d] = inner.shape(d);
  }
  return out;
}

// Cuts each tensor's cut-tile boxes into disjoint cells and lists their
// holder ranks.
absl::StatusOr<std::vector<CutTileGroup>> GroupCutTiles(
    int32_t tensor, const std::vector<std::pair<Box, int32_t>>& boxes) {
  if (boxes.empty()) return std::vector<CutTileGroup>{};
  const int rank = boxes[0].first.rank();
  std::vector<std::vector<int64_t>> coords(rank);
  for (const auto& [b, r] : boxes) {
    for (int d = 0; d < rank; ++d) {
      coords[d].push_back(b.origin(d));
      coords[d].push_back(b.limit(d));
    }
  }
  int64_t cells = 1;
  for (auto& c : coords) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    cells *= static_cast<int64_t>(c.size());
    if (cells > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          "too many distinct cut FP8 tiles to plan an amax exchange");
    }
  }
  std::map<std::vector<int64_t>, std::vector<int32_t>> holders;
  for (const auto& [b, r] : boxes) {
    std::vector<std::pair<size_t, size_t>> range(rank);
    for (int d = 0; d < rank; ++d) {
      range[d] = {static_cast<size_t>(
                      std::lower_bound(coords[d].begin(), coords[d].end(), b.origin(d)) -
                      coords[d].begin()),
                  static_cast<size_t>(
                      std::lower_bound(coords[d].begin(), coords[d].end(), b.limit(d)) -
                      coords[d].begin())};
    }
    std::vector<int64_t> idx(rank);
    for (int d = 0; d < rank; ++d) idx[d] = range[d].first;
    while (true) {
      holders[idx].push_back(r);
      int d = rank - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < static_cast<int64_t>(range[d].second)) break;
        idx[d] = range[d].first;
      }
      if (d < 0) break;
    }
  }
  std::vector<CutTileGroup> out;
  for (auto& [idx, ranks] : holders) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    Box::Indices o(rank), e(rank);
    for (int d = 0; d < rank; ++d) {
      o[d] = coords[d][idx[d]];
      e[d] = coords[d][idx[d] + 1] - coords[d][idx[d]];
    }
    out.push_back({tensor, Box::UncheckedMove(std::move(o), std::move(e)),
                   std::move(ranks)});
  }
  return out;
}

}  // namespace

const char* ConversionKindName(ConversionKind k) {
  switch (k) {
    case ConversionKind::kCastF32:
      return "cast_f32";
    case ConversionKind::kNegExpF32:
      return "neg_exp_f32";
    case ConversionKind::kFp8Block:
      return "fp8_block";
    case ConversionKind::kFp8BlockUe8m0:
      return "fp8_block_ue8m0";
    case ConversionKind::kFp8BlockRequantUe8m0:
      return "fp8_block_requant_ue8m0";
    case ConversionKind::kMxfp8:
      return "mxfp8";
    case ConversionKind::kNvfp4:
      return "nvfp4";
  }
  return "unknown";
}

bool IsBlockQuantized(ConversionKind k) {
  return k == ConversionKind::kFp8Block || k == ConversionKind::kFp8BlockUe8m0 ||
         k == ConversionKind::kFp8BlockRequantUe8m0 || k == ConversionKind::kMxfp8;
}

int64_t ScaleElementBytes(ConversionKind k) { return k == ConversionKind::kMxfp8 ? 1 : 4; }

std::string ScaleTensorName(const std::string& weight) {
  return weight + "_scale_inv";
}

std::string MxScaleTensorName(const std::string& weight) { return weight + "_scale"; }

Box IntersectingTiles(const Box& box, const std::vector<int64_t>& tile) {
  Box::Indices o(box.rank()), e(box.rank());
  for (int d = 0; d < box.rank(); ++d) {
    o[d] = box.origin(d) / tile[d];
    e[d] = IsEmpty(box) ? 0 : CeilDiv(box.limit(d), tile[d]) - o[d];
  }
  return Box::UncheckedMove(std::move(o), std::move(e));
}

Box OwnedTiles(const Box& box, const std::vector<int64_t>& tile) {
  Box::Indices o(box.rank()), e(box.rank());
  for (int d = 0; d < box.rank(); ++d) {
    o[d] = CeilDiv(box.origin(d), tile[d]);
    e[d] = std::max<int64_t>(0, CeilDiv(box.limit(d), tile[d]) - o[d]);
  }
  return Box::UncheckedMove(std::move(o), std::move(e));
}

absl::StatusOr<ConvertedSource> ConvertSource(SideLayout src,
                                              const SideLayout& dst,
                                              int64_t block) {
  ConvertedSource out;
  absl::flat_hash_map<std::string, int32_t> src_by_name, dst_by_name;
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    src_by_name[src.tensors[i].name] = static_cast<int32_t>(i);
  }
  for (size_t i = 0; i < dst.tensors.size(); ++i) {
    dst_by_name[dst.tensors[i].name] = static_cast<int32_t>(i);
  }
  // Per src tensor: the conversion kind and (block kinds) the src index of
  // its scale tensor.
  struct Plan1 {
    ConversionKind kind;
    DType from;
    int32_t scale_tensor = -1;
    std::vector<int64_t> tile;
  };
  std::map<int32_t, Plan1> converted;
  for (const TensorSpec& d : dst.tensors) {
    auto it = src_by_name.find(d.name);
    if (it == src_by_name.end()) continue;
    const TensorSpec s = src.tensors[it->second];
    if (s.dtype == d.dtype && d.transform == Transform::kNone) continue;
    if (s.shape != d.shape || s.stacked != d.stacked) continue;  // planner says
    const TensorSpec* scale = nullptr;
    if (auto sc = dst_by_name.find(ScaleTensorName(d.name)); sc != dst_by_name.end()) {
      scale = &dst.tensors[sc->second];
    } else if (auto mx = dst_by_name.find(MxScaleTensorName(d.name));
               mx != dst_by_name.end() && dst.tensors[mx->second].dtype == DType::kU8) {
      scale = &dst.tensors[mx->second];
    }
    REFIT_ASSIGN_OR_RETURN(ConversionKind kind, KindFor(s, d, scale));
    Plan1 p{kind, s.dtype, -1, {}};
    if (IsBlockQuantized(kind)) {
      if (d.shape.size() < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", d.name, ": FP8 block quantization needs 2 or more dims"));
      }
      const bool mx = kind == ConversionKind::kMxfp8;
      p.tile.assign(d.shape.size(), 1);
      p.tile[d.shape.size() - 1] = mx ? kMxfp8Block : block;
      p.tile[d.shape.size() - 2] = mx ? 1 : block;
      if (mx && d.shape.back() % kMxfp8Block != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", d.name, ": MXFP8 needs the last dim (", d.shape.back(),
            ") to be a multiple of ", kMxfp8Block, " (vLLM's Mxfp8OnlineLinearMethod "
            "refuses it too)"));
      }
      std::vector<int64_t> grid(d.shape.size());
      for (size_t k = 0; k < d.shape.size(); ++k) grid[k] = CeilDiv(d.shape[k], p.tile[k]);
      if (scale->shape != grid || scale->stacked != d.stacked) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", scale->name, ": shape [", absl::StrJoin(scale->shape, ", "),
            "] is not the ", p.tile[d.shape.size() - 2], "x", p.tile.back(),
            " tile grid [", absl::StrJoin(grid, ", "), "] of ", d.name));
      }
      if (src_by_name.count(scale->name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", scale->name, ": the trainer holds it, but its weight ",
            d.name, " is ", DTypeName(s.dtype), ", not f8e4m3"));
      }
      TensorSpec st = *scale;
      st.transform = Transform::kNone;
      p.scale_tensor = static_cast<int32_t>(src.tensors.size());
      src.tensors.push_back(std::move(st));
    }
    src.tensors[it->second].dtype = d.dtype;
    converted[it->second] = std::move(p);
  }
  if (converted.empty()) {
    out.layout = std::move(src);
    return out;
  }
  // Re-point every converted record at a scratch buffer of its own.
  std::map<int32_t, std::vector<std::pair<Box, int32_t>>> cut_boxes;
  const size_t num_records = src.records.size();
  for (size_t i = 0; i < num_records; ++i) {
    Record& r = src.records[i];
    auto it = converted.find(r.tensor);
    if (it == converted.end()) continue;
    const Plan1& p = it->second;
    const TensorSpec& t = src.tensors[r.tensor];
    Conversion c;
    c.kind = p.kind;
    c.from_dtype = p.from;
    c.from = r;
    c.tile = p.tile;
    const int64_t n = UncheckedNumElements(r.box);
    const int32_t buf = static_cast<int32_t>(src.buffers.size());
    src.buffers.push_back(
        {r.rank, absl::StrCat("refit.converted.", i), n * DTypeSize(t.dtype), {}, true});
    c.to_buffer = buf;
    r.buffer = buf;
    r.buffer_step = 0;
    r.byte_offset = 0;
    r.dims = SubArrayDims(r.box.shape(), r.box.shape());
    if (IsBlockQuantized(p.kind)) {
      Box owned = OwnedTiles(c.from.box, p.tile);
      if (!IsEmpty(owned)) {
        const int32_t sbuf = static_cast<int32_t>(src.buffers.size());
        src.buffers.push_back({r.rank, absl::StrCat("refit.scales.", i),
                               UncheckedNumElements(owned) * ScaleElementBytes(p.kind),
                               {}, true});
        Record sr;
        sr.tensor = p.scale_tensor;
        sr.rank = r.rank;
        sr.buffer = sbuf;
        sr.box = owned;
        sr.dims = SubArrayDims(owned.shape(), owned.shape());
        c.scale_buffer = sbuf;
        src.records.push_back(std::move(sr));
      }
      const Box whole = WholeTiles(c.from.box, p.tile, t.shape);
      for (Box& b : Difference(IntersectingTiles(c.from.box, p.tile), whole)) {
        if (!IsEmpty(b)) cut_boxes[c.from.tensor].push_back({std::move(b), c.from.rank});
      }
    }
    out.conversions.push_back(std::move(c));
  }
  std::stable_sort(out.conversions.begin(), out.conversions.end(),
                   [](const Conversion& a, const Conversion& b) {
                     return a.from.rank < b.from.rank;
                   });
  for (const auto& [tensor, boxes] : cut_boxes) {
    REFIT_ASSIGN_OR_RETURN(
        std::vector<CutTileGroup> g,
        AnnotateStatus(GroupCutTiles(tensor, boxes),
                       absl::StrCat("tensor ", src.tensors[tensor].name)));
    for (CutTileGroup& x : g) out.cut_tiles.push_back(std::move(x));
  }
  out.layout = std::move(src);
  return out;
}

}  // namespace refit
