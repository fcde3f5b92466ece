#include "plan/conversion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace refit {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// What a destination tensor asks of its source: the kind and, kQuantize,
// the format row.
struct Target {
  ConversionKind kind;
  QuantFormat format = QuantFormat::kFp8Block;
  ScaleSwizzle swizzle = ScaleSwizzle::kRowMajor;
};

Target Quantize(QuantFormat f, ScaleSwizzle s = ScaleSwizzle::kRowMajor) {
  return {ConversionKind::kQuantize, f, s};
}

bool IsFloatSource(DType d) {
  return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32;
}

// A tensor's format for errors: "nvfp4 codes", or its dtype.
std::string FormatOrDtype(const TensorSpec& t) {
  return t.format ? absl::StrCat("format ", TensorFormatString(t))
                  : std::string(DTypeName(t.dtype));
}

// What engine tensor `d` asks of trainer tensor `s`, read from d's format
// (TensorSpec::format) and, for a quantized weight, its scale tensor's
// dtype (which row of the format: kFp8BlockRequantUe8m0's u8 scales are
// the packed row). `place` says where d lives, for errors.
absl::StatusOr<Target> TargetFor(const TensorSpec& s, const TensorSpec& d,
                                 const TensorSpec* scale, const std::string& place) {
  const std::string what = absl::StrCat("tensor ", d.name, place);
  if (!IsFloatSource(s.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the engine holds ", FormatOrDtype(d),
        " but the trainer ", DTypeName(s.dtype),
        ", which refit converts from bf16, f16 or f32 only"));
  }
  if (!d.format.has_value()) {
    if (d.dtype == DType::kF32 && d.transform == Transform::kNegExp) {
      return Target{ConversionKind::kNegExpF32};
    }
    if (d.dtype == DType::kF32 && d.transform == Transform::kNone) {
      return Target{ConversionKind::kCastF32};
    }
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the engine holds ", DTypeName(d.dtype),
        d.transform != Transform::kNone
            ? absl::StrCat(" (", TransformName(d.transform), ")")
            : std::string(),
        " and the trainer ", DTypeName(s.dtype),
        "; refit converts bf16/f16/f32 to f32, to -exp f32, or to the quantized format "
        "the engine tensor declares (fp8_block, fp8_block_ue8m0, fp8_block_requant_ue8m0, "
        "mxfp8, nvfp4), and this tensor declares none"));
  }
  if (d.quant_role != QuantRole::kCodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the engine holds it as ", TensorFormatString(d), " and the trainer as ",
        DTypeName(s.dtype), " weights; refit quantizes a weight into its codes only"));
  }
  if (*d.format == QuantFormat::kFp8Tensor) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the engine holds fp8_tensor (one scale per tensor) and the trainer ",
        DTypeName(s.dtype), "; refit quantizes to block scales only (fp8_block, mxfp8, "
        "nvfp4): serve the engine with quant=fp8"));
  }
  if (scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the engine holds it as ", TensorFormatString(d), " without its scales (",
        QuantFormatTraits(*d.format).block_rows == 1 ? MxScaleTensorName(d.name)
                                                     : ScaleTensorName(d.name),
        " of format ", QuantFormatName(*d.format), ", role scales)"));
  }
  if (scale->format != d.format) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", scale->name, ": the scales of ", d.name, place, " are format ",
        QuantFormatName(*scale->format), " and the weight ", QuantFormatName(*d.format),
        "; a weight and its scales are one format"));
  }
  REFIT_ASSIGN_OR_RETURN(const QuantFormatRow row,
                         AnnotateStatus(FindQuantFormatByScale(*d.format, scale->dtype),
                                        absl::StrCat("tensor ", scale->name, place)));
  return Quantize(row.format, row.swizzle);
}

// The scale tensor of engine weight `d`: its "<w>_scale_inv" or "<w>_scale"
// namesake of role kScales; nullptr without one.
const TensorSpec* ScaleOf(const SideLayout& dst,
                          const absl::flat_hash_map<std::string, int32_t>& dst_by_name,
                          const TensorSpec& d) {
  for (const std::string& n : {ScaleTensorName(d.name), MxScaleTensorName(d.name)}) {
    auto it = dst_by_name.find(n);
    if (it != dst_by_name.end() && dst.tensors[it->second].quant_role == QuantRole::kScales) {
      return &dst.tensors[it->second];
    }
  }
  return nullptr;
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

// Whether box starts on a tile boundary and ends on one or at `shape`'s end
// in every dim: then IntersectingTiles and WholeTiles agree (no cut tile).
bool TileAligned(const Box& box, const std::vector<int64_t>& tile,
                 absl::Span<const int64_t> shape) {
  for (int d = 0; d < box.rank(); ++d) {
    const int64_t t = tile[d];
    if (box.origin(d) % t != 0 || (box.limit(d) % t != 0 && box.limit(d) != shape[d])) return false;
  }
  return true;
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

// The records of a per-row scale tensor (ScaleSwizzle::kPackedUe8m0)
// from `tiles`, the record of its owned tiles (row-major, one byte a tile):
// the tiles' weight rows, each reading its tile's byte (a stride-0 digit of
// `tile_rows`); the last tile, cut by the weight's `rows`, in a record of
// its own.
std::vector<Record> RowBroadcastScaleRecords(const Record& tiles, int64_t tile_rows,
                                             int64_t rows) {
  const int d = tiles.box.rank() - 2;
  const int64_t t0 = tiles.box.origin(d), nt = tiles.box.shape(d);
  const int64_t tile_stride = tiles.dims[d].splits.empty() ? 0 : tiles.dims[d].splits[0].stride;
  std::vector<Record> out;
  auto add = [&](int64_t first_tile, int64_t n_tiles) {
    if (n_tiles <= 0) return;
    Record r = tiles;
    Box::Indices o(tiles.box.origin().begin(), tiles.box.origin().end());
    Box::Indices e(tiles.box.shape().begin(), tiles.box.shape().end());
    o[d] = first_tile * tile_rows;
    e[d] = std::min(rows, (first_tile + n_tiles) * tile_rows) - o[d];
    const int64_t per_tile = e[d] / n_tiles;  // tile_rows, or the cut tile's rows
    r.box = Box::UncheckedMove(std::move(o), std::move(e));
    r.byte_offset = tiles.byte_offset + (first_tile - t0) * tile_stride;  // one byte a tile
    r.dims[d].splits.clear();
    if (n_tiles > 1) r.dims[d].splits.push_back({n_tiles, tile_stride});
    r.dims[d].splits.push_back({per_tile, 0});
    out.push_back(std::move(r));
  };
  // The tiles whose rows are all the weight's, then the cut last one.
  const int64_t whole = std::max<int64_t>(0, std::min(nt, rows / tile_rows - t0));
  add(t0, whole);
  add(t0 + whole, nt - whole);
  return out;
}

// Per converted src tensor: the conversion's kind and format row and
// (kQuantize) the src index of its scale tensor.
struct Plan1 {
  Target what;
  DType from;
  int32_t scale_tensor = -1;
  std::vector<int64_t> tile;
  int32_t dst_tensor = -1;
  int32_t global_tensor = -1;  // kNvfp4: src index of the global scale
  bool global_leader = false;  // kNvfp4: this weight carries it
  Nvfp4Recipe recipe = Nvfp4Recipe::kModelopt;  // kNvfp4
};

// The packed (kNvfp4) box of a trainer record: its last extent halved.
// INVALID_ARGUMENT when a shard boundary falls inside a byte.
absl::StatusOr<Box> PackedBox(const Record& r, const std::string& name) {
  const int n = r.box.rank();
  if (n < 1 || r.box.origin(n - 1) % 2 != 0 || r.box.limit(n - 1) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, ", trainer rank ", r.rank, ": its shard ", r.box.ToString(),
        " starts or ends at an odd column, inside an NVFP4 byte (two E2M1 codes); "
        "refit packs whole bytes per trainer rank"));
  }
  Box::Indices o(r.box.origin().begin(), r.box.origin().end());
  Box::Indices e(r.box.shape().begin(), r.box.shape().end());
  o[n - 1] /= 2;
  e[n - 1] /= 2;
  return Box::UncheckedMove(std::move(o), std::move(e));
}

// NVFP4 parameters: the converted dst weights whose records share an
// engine buffer form one parameter; the one weight of it with a dst tensor
// GlobalScaleTensorName(weight) carries the parameter's global scale,
// which joins the src tensors. Sets global_tensor / global_leader.
absl::Status AddNvfp4GlobalScales(
    const SideLayout& dst, const absl::flat_hash_map<std::string, int32_t>& dst_by_name,
    const absl::flat_hash_map<std::string, int32_t>& src_by_name, SideLayout* src,
    std::map<int32_t, Plan1>* converted) {
  std::map<int32_t, int32_t> src_of;  // dst weight -> src tensor
  for (auto& [s, p] : *converted) {
    if (p.what.format == QuantFormat::kNvfp4 && IsBlockQuantized(p.what.kind)) {
      src_of[p.dst_tensor] = s;
    }
  }
  if (src_of.empty()) return absl::OkStatus();
  // Union-find over dst weights through shared buffers.
  std::map<int32_t, int32_t> parent;
  std::function<int32_t(int32_t)> root = [&](int32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const auto& [d, s] : src_of) parent[d] = d;
  std::map<int32_t, int32_t> buffer_first;
  for (const Record& r : dst.records) {
    if (!src_of.count(r.tensor)) continue;
    auto [it, fresh] = buffer_first.emplace(r.buffer, r.tensor);
    if (!fresh) parent[root(r.tensor)] = root(it->second);
  }
  std::map<int32_t, std::vector<int32_t>> groups;
  for (const auto& [d, s] : src_of) groups[root(d)].push_back(d);
  for (const auto& [g, members] : groups) {
    std::vector<std::string> names;
    int32_t leader = -1, global = -1;
    for (int32_t m : members) {
      names.push_back(dst.tensors[m].name);
      auto it = dst_by_name.find(GlobalScaleTensorName(dst.tensors[m].name));
      if (it == dst_by_name.end()) continue;
      if (leader >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors ", dst.tensors[leader].name, " and ", dst.tensors[m].name,
            " share an engine parameter but each has an NVFP4 global scale (",
            GlobalScaleTensorName(dst.tensors[m].name), "); vLLM keeps one"));
      }
      leader = m;
      global = it->second;
    }
    if (leader < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NVFP4 weights ", absl::StrJoin(names, ", "), ": no global scale ",
          GlobalScaleTensorName(names[0]), " in the engine for their parameter"));
    }
    const TensorSpec& lw = dst.tensors[leader];
    const Box lead_box = LeadingBox(Box::Unchecked(
        std::vector<int64_t>(lw.shape.size(), 0), lw.shape));
    const std::vector<int64_t> lead(lead_box.shape().begin(), lead_box.shape().end());
    for (int32_t m : members) {
      const TensorSpec& w = dst.tensors[m];
      const Box mb = LeadingBox(Box::Unchecked(std::vector<int64_t>(w.shape.size(), 0),
                                               w.shape));
      if (w.stacked != lw.stacked ||
          std::vector<int64_t>(mb.shape().begin(), mb.shape().end()) != lead) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NVFP4 weights ", lw.name, " and ", w.name, " share an engine parameter "
            "but not their leading (expert) dims"));
      }
    }
    const TensorSpec& gs = dst.tensors[global];
    if (gs.shape != lead || gs.dtype != DType::kF32 || gs.stacked != lw.stacked ||
        gs.format != QuantFormat::kNvfp4 || gs.quant_role != QuantRole::kGlobalScale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", gs.name, TensorPlace(dst, global),
          ": an NVFP4 global scale is f32 of shape [", absl::StrJoin(lead, ", "),
          "] (the leading dims of ", lw.name, "), format nvfp4, role global_scale, not ",
          DTypeName(gs.dtype), " [", absl::StrJoin(gs.shape, ", "), "]",
          gs.format ? absl::StrCat(", ", TensorFormatString(gs)) : ", no format"));
    }
    if (src_by_name.count(gs.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", gs.name, ": the trainer holds it, but its weight ", lw.name,
          " is not NVFP4"));
    }
    if (gs.transform != Transform::kNone && gs.transform != Transform::kNvfp4Vllm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", gs.name, ": an NVFP4 global scale's transform is none (ModelOpt's "
          "recipe) or nvfp4_vllm (vLLM's online recipe), not ",
          TransformName(gs.transform)));
    }
    const Nvfp4Recipe recipe = gs.transform == Transform::kNvfp4Vllm ? Nvfp4Recipe::kVllm
                                                                      : Nvfp4Recipe::kModelopt;
    TensorSpec st = gs;
    st.transform = Transform::kNone;
    const int32_t gsrc = static_cast<int32_t>(src->tensors.size());
    src->tensors.push_back(std::move(st));
    for (int32_t m : members) {
      Plan1& p = (*converted)[src_of[m]];
      p.global_tensor = gsrc;
      p.global_leader = m == leader;
      p.recipe = recipe;
    }
  }
  return absl::OkStatus();
}

// A trainer already holding a quantized format moves its codes and scales
// as bytes into engine tensors of the same format and role; any other pair
// is refused.
absl::Status CheckQuantizedPairs(const SideLayout& src, const SideLayout& dst,
                                 const absl::flat_hash_map<std::string, int32_t>& src_by_name) {
  for (const TensorSpec& d : dst.tensors) {
    auto it = src_by_name.find(d.name);
    if (it == src_by_name.end()) continue;
    const TensorSpec& s = src.tensors[it->second];
    if (!s.format.has_value()) continue;
    if (s.format == d.format && s.quant_role == d.quant_role) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", d.name, TensorPlace(src, it->second), ": the trainer holds it as ",
        FormatOrDtype(s), " and the engine as ", FormatOrDtype(d),
        "; refit moves a low-precision trainer's codes and scales as bytes into an "
        "engine of the same format only (it neither dequantizes nor requantizes them): "
        "serve the engine in the trainer's format, or register BF16 weights"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* Nvfp4RecipeName(Nvfp4Recipe r) {
  switch (r) {
    case Nvfp4Recipe::kModelopt:
      return "modelopt";
    case Nvfp4Recipe::kVllm:
      return "vllm";
  }
  return "unknown";
}

std::string ConversionFormatName(const Conversion& c) {
  switch (c.kind) {
    case ConversionKind::kCastF32:
      return "cast_f32";
    case ConversionKind::kNegExpF32:
      return "neg_exp_f32";
    case ConversionKind::kQuantize:
      break;
  }
  const std::string name = QuantFormatRowOf(c)->name;
  if (c.format == QuantFormat::kNvfp4 && c.recipe != Nvfp4Recipe::kModelopt) {
    return absl::StrCat(name, " recipe=", Nvfp4RecipeName(c.recipe));
  }
  return name;
}

const QuantFormatRow* QuantFormatRowOf(const Conversion& c) {
  return IsBlockQuantized(c.kind) ? &QuantFormatTraits(c.format, c.swizzle) : nullptr;
}

bool IsBlockQuantized(ConversionKind k) { return k == ConversionKind::kQuantize; }

bool QuantizesTo(const Conversion& c, QuantFormat f) {
  return IsBlockQuantized(c.kind) && c.format == f;
}

int64_t ScaleElementBytes(const Conversion& c) {
  const QuantFormatRow* row = QuantFormatRowOf(c);
  return row == nullptr ? 4 : DTypeSize(row->scale_dtype);
}

std::string GlobalScaleTensorName(const std::string& weight) { return weight + "_scale_2"; }

Box LeadingBox(const Box& box) {
  const int n = std::max(0, box.rank() - 2);
  return Box::Unchecked(box.origin().subspan(0, n), box.shape().subspan(0, n));
}

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
  REFIT_RETURN_IF_ERROR(CheckQuantizedPairs(src, dst, src_by_name));
  // Per src tensor: the conversion kind and (block kinds) the src index of
  // its scale tensor.
  std::map<int32_t, Plan1> converted;
  for (const TensorSpec& d : dst.tensors) {
    auto it = src_by_name.find(d.name);
    if (it == src_by_name.end()) continue;
    const TensorSpec s = src.tensors[it->second];
    if (s.dtype == d.dtype && s.format == d.format && d.transform == Transform::kNone) continue;
    const TensorSpec* scale = d.format ? ScaleOf(dst, dst_by_name, d) : nullptr;
    // NVFP4: the engine's weight is packed, half the trainer's last dim.
    std::vector<int64_t> unpacked = d.shape;
    if (d.format && d.quant_role == QuantRole::kCodes && !unpacked.empty()) {
      unpacked.back() *= QuantFormatTraits(*d.format).codes_per_byte;
    }
    if (s.shape != unpacked || s.stacked != d.stacked) continue;  // planner says
    REFIT_ASSIGN_OR_RETURN(const Target what,
                           TargetFor(s, d, scale, TensorPlace(dst, dst_by_name[d.name])));
    Plan1 p{what, s.dtype, -1, {}};
    p.dst_tensor = dst_by_name[d.name];
    if (IsBlockQuantized(what.kind)) {
      if (d.shape.size() < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", d.name, ": FP8 block quantization needs 2 or more dims"));
      }
      const bool mx = what.format == QuantFormat::kMxfp8;
      const bool nv = what.format == QuantFormat::kNvfp4;
      // The row's block; the FP8 tile rows take the planner's `block`.
      const QuantFormatRow& row = QuantFormatTraits(what.format, what.swizzle);
      const bool fixed = row.block_rows == 1;
      p.tile.assign(d.shape.size(), 1);
      p.tile[d.shape.size() - 1] = fixed ? row.block_cols : block;
      p.tile[d.shape.size() - 2] = fixed ? 1 : block;
      if (nv && s.shape.back() % kNvfp4Block != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", d.name, ": NVFP4 needs the last dim (", s.shape.back(),
            ") to be a multiple of ", kNvfp4Block, " (vLLM's ModelOptNvFp4LinearMethod "
            "refuses it too)"));
      }
      if (mx && d.shape.back() % kMxfp8Block != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", d.name, ": MXFP8 needs the last dim (", d.shape.back(),
            ") to be a multiple of ", kMxfp8Block, " (vLLM's Mxfp8OnlineLinearMethod "
            "refuses it too)"));
      }
      std::vector<int64_t> grid(d.shape.size());
      for (size_t k = 0; k < d.shape.size(); ++k) grid[k] = CeilDiv(s.shape[k], p.tile[k]);
      // Exponent bytes per weight row: the grid's rows are the weight's.
      if (what.swizzle == ScaleSwizzle::kPackedUe8m0) {
        grid[d.shape.size() - 2] = s.shape[d.shape.size() - 2];
      }
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
    src.tensors[it->second].shape = d.shape;
    src.tensors[it->second].format = d.format;
    src.tensors[it->second].quant_role = d.quant_role;
    converted[it->second] = std::move(p);
  }
  if (converted.empty()) {
    out.layout = std::move(src);
    return out;
  }
  REFIT_RETURN_IF_ERROR(AddNvfp4GlobalScales(dst, dst_by_name, src_by_name, &src, &converted));
  // Re-point every converted record at a scratch buffer of its own.
  std::map<int32_t, std::vector<std::pair<Box, int32_t>>> cut_boxes, global_boxes;
  // The trainer's (unpacked) shape of a converted record's tensor.
  auto src_shape_of = [&](const Conversion& c) {
    std::vector<int64_t> s = src.tensors[c.from.tensor].shape;
    if (QuantizesTo(c, QuantFormat::kNvfp4)) s.back() *= 2;
    return s;
  };
  const size_t num_records = src.records.size();
  // The conversions in record order (sorted by rank below, moved once);
  // about one scale record each (more for packed and NVFP4 scales).
  std::vector<Conversion> made;
  size_t num_made = 0;
  for (const Record& r : src.records) num_made += converted.count(r.tensor);
  made.reserve(num_made);
  src.records.reserve(num_records + num_made + num_made / 8);
  for (size_t i = 0; i < num_records; ++i) {
    Record& r = src.records[i];
    auto it = converted.find(r.tensor);
    if (it == converted.end()) continue;
    const Plan1& p = it->second;
    const TensorSpec& t = src.tensors[r.tensor];
    Conversion c;
    c.kind = p.what.kind;
    c.format = p.what.format;
    c.swizzle = p.what.swizzle;
    c.from_dtype = p.from;
    c.from = r;
    c.tile = p.tile;
    const bool nv = QuantizesTo(c, QuantFormat::kNvfp4);
    if (nv) {
      REFIT_ASSIGN_OR_RETURN(r.box, PackedBox(c.from, t.name));
      c.global_tensor = p.global_tensor;
      c.recipe = p.recipe;
    }
    const int64_t n = UncheckedNumElements(r.box);
    const int32_t buf = static_cast<int32_t>(src.buffers.size());
    src.buffers.push_back(
        {r.rank, absl::StrCat("refit.converted.", i), n * DTypeSize(t.dtype), {}, true});
    c.to_buffer = buf;
    r.buffer = buf;
    r.buffer_step = 0;
    r.byte_offset = 0;
    r.dims = SubArrayDims(r.box.shape(), r.box.shape());
    if (IsBlockQuantized(c.kind)) {
      Box owned = OwnedTiles(c.from.box, p.tile);
      if (!IsEmpty(owned)) {
        const int32_t sbuf = static_cast<int32_t>(src.buffers.size());
        src.buffers.push_back({r.rank, absl::StrCat("refit.scales.", i),
                               UncheckedNumElements(owned) * ScaleElementBytes(c),
                               {}, true});
        Record sr;
        sr.tensor = p.scale_tensor;
        sr.rank = r.rank;
        sr.buffer = sbuf;
        sr.box = owned;
        sr.dims = SubArrayDims(owned.shape(), owned.shape());
        c.scale_buffer = sbuf;
        if (c.swizzle == ScaleSwizzle::kPackedUe8m0) {
          const int64_t rows = src_shape_of(c)[owned.rank() - 2];
          for (Record& x : RowBroadcastScaleRecords(sr, p.tile[owned.rank() - 2], rows)) {
            src.records.push_back(std::move(x));
          }
        } else {
          src.records.push_back(std::move(sr));
        }
      }
      if (nv) {
        const Box lead = LeadingBox(c.from.box);
        const int fr = c.from.box.rank();
        if (p.global_leader && c.from.box.origin(fr - 2) == 0 &&
            c.from.box.origin(fr - 1) == 0 && !IsEmpty(c.from.box)) {
          const int32_t gbuf = static_cast<int32_t>(src.buffers.size());
          // (r may dangle here: the scale record was pushed above.)
          src.buffers.push_back({c.from.rank, absl::StrCat("refit.global_scales.", i),
                                 UncheckedNumElements(lead) * 4, {}, true});
          Record gr;
          gr.tensor = p.global_tensor;
          gr.rank = c.from.rank;
          gr.buffer = gbuf;
          gr.box = lead;
          gr.dims = SubArrayDims(lead.shape(), lead.shape());
          c.global_buffer = gbuf;
          src.records.push_back(std::move(gr));
        }
        global_boxes[p.global_tensor].push_back({lead, c.from.rank});
      }
      // The tiles the record cuts: none when it starts and ends on tile
      // boundaries (or the tensor's end) in every dim.
      const std::vector<int64_t> shape = src_shape_of(c);
      if (!TileAligned(c.from.box, p.tile, shape)) {
        const Box whole = WholeTiles(c.from.box, p.tile, shape);
        for (Box& b : Difference(IntersectingTiles(c.from.box, p.tile), whole)) {
          if (!IsEmpty(b)) cut_boxes[c.from.tensor].push_back({std::move(b), c.from.rank});
        }
      }
    }
    made.push_back(std::move(c));
  }
  // By rank, in record order within a rank (a sort of (rank, index) pairs).
  std::vector<std::pair<int32_t, int32_t>> order(made.size());
  for (size_t i = 0; i < made.size(); ++i) order[i] = {made[i].from.rank, static_cast<int32_t>(i)};
  std::sort(order.begin(), order.end());
  out.conversions.reserve(made.size());
  for (const auto& [rank, i] : order) out.conversions.push_back(std::move(made[i]));
  for (const auto& [tensor, boxes] : cut_boxes) {
    REFIT_ASSIGN_OR_RETURN(
        std::vector<CutTileGroup> g,
        AnnotateStatus(GroupCutTiles(tensor, boxes),
                       absl::StrCat("tensor ", src.tensors[tensor].name)));
    for (CutTileGroup& x : g) out.cut_tiles.push_back(std::move(x));
  }
  for (const auto& [tensor, boxes] : global_boxes) {
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
