#include "exec/convert/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
#include "exec/convert/nvfp4.h"
#include "exec/convert/nvfp4_vllm.h"
#include "exec/convert/quantize.h"

namespace refit {
namespace {

// Row-major index of tile coords `t` inside tile box `b`.
int64_t IndexIn(const Box& b, absl::Span<const int64_t> t) {
  int64_t k = 0;
  for (int d = 0; d < b.rank(); ++d) k = k * b.shape(d) + (t[d] - b.origin(d));
  return k;
}

// Calls fn(coords) for every tile of `b`, row-major.
template <typename Fn>
void ForEachTile(const Box& b, Fn fn) {
  if (IsEmpty(b)) return;
  std::vector<int64_t> t(b.origin().begin(), b.origin().end());
  while (true) {
    fn(absl::Span<const int64_t>(t));
    int d = b.rank() - 1;
    for (; d >= 0; --d) {
      if (++t[d] < b.limit(d)) break;
      t[d] = b.origin(d);
    }
    if (d < 0) return;
  }
}

}  // namespace

absl::Status ConvertOps::QuantizeWhole(const char* dense, DType dtype, const Box& box,
                                       const std::vector<int64_t>& tile, ScaleMode mode,
                                       char* out, char* scales, absl::string_view what) {
  REFIT_ASSIGN_OR_RETURN(std::vector<float> amax,
                         AnnotateStatus(TileAmax(dense, dtype, box, tile), what));
  return AnnotateStatus(Quantize(dense, dtype, box, tile, amax, mode, out, scales), what);
}

absl::Status ConvertOps::Nvfp4GlobalAmax(const char* dense, DType dtype, const Box& box,
                                          std::vector<float>* global, absl::string_view what) {
  REFIT_ASSIGN_OR_RETURN(Nvfp4Amaxes a, AnnotateStatus(Nvfp4Amax(dense, dtype, box, false), what));
  *global = std::move(a.global);
  return absl::OkStatus();
}

absl::StatusOr<Converter> Converter::Create(const Plan& plan, int32_t rank,
                                            const std::set<int32_t>& global_amax_only,
                                            const std::set<int32_t>& engine_amax) {
  Converter cv;
  cv.plan_ = &plan;
  cv.rank_ = rank;
  const SideLayout& src = plan.src;
  auto own_buffer = [&](int32_t b) {
    return b >= 0 && b < static_cast<int32_t>(src.buffers.size()) &&
           src.buffers[b].rank == rank && src.buffers[b].scratch;
  };
  for (const Conversion& c : plan.conversions) {
    if (c.from.rank != rank) continue;
    // A block conversion without codes (to_buffer -1) writes only its
    // scales (its receivers quantize on pull, exec/pull/fused_pull.h).
    const bool scales_only = c.to_buffer == -1 && IsBlockQuantized(c.kind) &&
                             c.format != QuantFormat::kNvfp4;
    if (c.from.tensor < 0 || c.from.tensor >= static_cast<int32_t>(src.tensors.size()) ||
        (!scales_only && !own_buffer(c.to_buffer)) ||
        (c.scale_buffer >= 0 && !own_buffer(c.scale_buffer))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer rank ", rank, ": a conversion's tensor or scratch buffers are "
          "not this rank's"));
    }
    Conv v;
    v.c = &c;
    v.tensor = &src.tensors[c.from.tensor];
    if (IsBlockQuantized(c.kind)) {
      if (c.tile.size() != static_cast<size_t>(c.from.box.rank())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", v.tensor->name, ": conversion tiles do not fit its rank"));
      }
      v.tiles = IntersectingTiles(c.from.box, c.tile);
    }
    if (QuantizesTo(c, QuantFormat::kNvfp4)) {
      if (c.global_tensor < 0 || c.global_tensor >= static_cast<int32_t>(src.tensors.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", v.tensor->name, ": its NVFP4 global scale tensor is missing"));
      }
      v.experts = LeadingBox(c.from.box);
      const int32_t index = static_cast<int32_t>(&c - plan.conversions.data());
      v.global_only = global_amax_only.count(index) > 0;
      v.skip = v.global_only && engine_amax.count(index) > 0;
    }
    cv.convs_.push_back(std::move(v));
  }
  for (const CutTileGroup& g : plan.cut_tiles) {
    if (!std::binary_search(g.ranks.begin(), g.ranks.end(), rank)) continue;
    cv.groups_.push_back({&g, std::vector<float>(UncheckedNumElements(g.tiles), 0.0f)});
    for (int32_t p : g.ranks) {
      if (p != rank) cv.peer_count_[p] += UncheckedNumElements(g.tiles);
    }
    for (Conv& v : cv.convs_) {
      if (v.c->from.tensor == g.tensor && Intersects(v.tiles, g.tiles)) v.has_cut = true;
    }
  }
  // Every NVFP4 record's experts are in its parameter's amax exchange.
  for (const Conv& v : cv.convs_) {
    if (!QuantizesTo(*v.c, QuantFormat::kNvfp4)) continue;
    int64_t covered = 0;
    for (const Group& gr : cv.groups_) {
      if (gr.g->tensor == v.c->global_tensor) {
        covered += UncheckedNumElements(Intersect(v.experts, gr.g->tiles));
      }
    }
    if (covered != UncheckedNumElements(v.experts)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", v.tensor->name, ", trainer rank ", rank,
          ": the plan has no global amax exchange for all of its experts"));
    }
  }
  return cv;
}

absl::StatusOr<std::vector<Box>> Converter::AmaxBands(const Conv& v,
                                                       absl::Span<char* const> buffers,
                                                       int64_t gather_bytes) const {
  const Box& box = v.c->from.box;
  REFIT_ASSIGN_OR_RETURN(const char* direct,
                         DenseRecordData(v.c->from, box, v.c->from_dtype, buffers));
  if (direct != nullptr || gather_bytes <= 0 || box.rank() == 0 || box.shape(0) <= 1) {
    return std::vector<Box>{box};
  }
  const int64_t row_bytes = UncheckedNumElements(box) / box.shape(0) * DTypeSize(v.c->from_dtype);
  const int64_t rows = std::max<int64_t>(1, gather_bytes / std::max<int64_t>(1, row_bytes));
  std::vector<Box> bands;
  for (int64_t b = box.origin(0); b < box.limit(0); b += rows) {
    std::vector<int64_t> origin(box.origin().begin(), box.origin().end());
    std::vector<int64_t> shape(box.shape().begin(), box.shape().end());
    origin[0] = b;
    shape[0] = std::min(rows, box.limit(0) - b);
    bands.push_back(Box::Unchecked(std::move(origin), std::move(shape)));
  }
  return bands;
}

namespace {

// Every tile `t` of `part`: at[IndexIn(all, t)] takes the larger of it and
// values[IndexIn(part, t)] (a NaN wins, as it would alone).
void MaxInto(const Box& part, const std::vector<float>& values, const Box& all,
             std::vector<float>* at) {
  ForEachTile(part, [&](absl::Span<const int64_t> t) {
    const float x = values[IndexIn(part, t)];
    float& o = (*at)[IndexIn(all, t)];
    if (std::isnan(x) || x > o) o = x;
  });
}

std::vector<int64_t> Nvfp4Tile(int rank);

}  // namespace

absl::StatusOr<std::map<int32_t, std::vector<float>>> Converter::Partials(
    ConvertOps& ops, absl::Span<char* const> buffers, char* gather, int64_t gather_bytes) {
  // NVFP4 global amaxes of one band each, which the ops may write only at
  // their Sync (a deque keeps their addresses).
  struct BandGlobal {
    Conv* v;
    Box experts;
    std::vector<float> global;
  };
  std::deque<BandGlobal> band_globals;
  for (Conv& v : convs_) {
    if (v.skip) continue;
    const bool nvfp4 = QuantizesTo(*v.c, QuantFormat::kNvfp4);
    if (!nvfp4 && !v.has_cut) continue;
    const std::string what = absl::StrCat("tensor ", v.tensor->name, ", trainer rank ", rank_);
    const DType dtype = v.c->from_dtype;
    const Box& box = v.c->from.box;
    // The amaxes of cut FP8 tiles (v.tiles) or of NVFP4 blocks.
    const std::vector<int64_t> block = nvfp4 ? Nvfp4Tile(box.rank()) : v.c->tile;
    const Box blocks = IntersectingTiles(box, block);
    REFIT_ASSIGN_OR_RETURN(const std::vector<Box> bands, AmaxBands(v, buffers, gather_bytes));
    if (nvfp4) v.global_amax.assign(UncheckedNumElements(v.experts), 0.0f);
    v.amax.assign(nvfp4 && !v.has_cut ? 0 : UncheckedNumElements(blocks), 0.0f);
    for (const Box& sub : bands) {
      const bool fits = gather != nullptr &&
                        UncheckedNumElements(sub) * DTypeSize(dtype) <= gather_bytes;
      REFIT_ASSIGN_OR_RETURN(const char* dense,
                             ops.Gather(v.c->from, sub, dtype, buffers, fits ? gather : nullptr));
      if (nvfp4 && !v.has_cut) {  // the global amax only, every record behind one wait
        band_globals.push_back({&v, LeadingBox(sub), {}});
        REFIT_RETURN_IF_ERROR(ops.Nvfp4GlobalAmax(dense, dtype, sub, &band_globals.back().global,
                                                  what));
        continue;
      }
      std::vector<float> amax;
      if (nvfp4) {
        absl::StatusOr<ConvertOps::Nvfp4Amaxes> a = ops.Nvfp4Amax(dense, dtype, sub, true);
        if (!a.ok()) return AnnotateStatus(a.status(), what);
        MaxInto(LeadingBox(sub), a->global, v.experts, &v.global_amax);
        amax = std::move(a->block);
      } else {
        absl::StatusOr<std::vector<float>> a = ops.TileAmax(dense, dtype, sub, v.c->tile);
        if (!a.ok()) return AnnotateStatus(a.status(), what);
        amax = *std::move(a);
      }
      MaxInto(IntersectingTiles(sub, block), amax, blocks, &v.amax);
    }
  }
  REFIT_RETURN_IF_ERROR(ops.Sync());  // the deferred global amaxes
  for (BandGlobal& g : band_globals) MaxInto(g.experts, g.global, g.v->experts, &g.v->global_amax);
  for (Group& gr : groups_) {
    std::fill(gr.own.begin(), gr.own.end(), 0.0f);
    for (const Conv& v : convs_) {
      if (v.skip) continue;
      if (QuantizesTo(*v.c, QuantFormat::kNvfp4) && v.c->global_tensor == gr.g->tensor) {
        ForEachTile(Intersect(v.experts, gr.g->tiles), [&](absl::Span<const int64_t> t) {
          float& o = gr.own[IndexIn(gr.g->tiles, t)];
          o = std::fmax(o, v.global_amax[IndexIn(v.experts, t)]);
        });
        continue;
      }
      if (v.c->from.tensor != gr.g->tensor || !v.has_cut) continue;
      ForEachTile(Intersect(v.tiles, gr.g->tiles), [&](absl::Span<const int64_t> t) {
        float& o = gr.own[IndexIn(gr.g->tiles, t)];
        o = std::fmax(o, v.amax[IndexIn(v.tiles, t)]);
      });
    }
  }
  std::map<int32_t, std::vector<float>> out;
  for (const auto& [peer, count] : peer_count_) {
    std::vector<float>& send = out[peer];
    send.reserve(count);
    for (const Group& gr : groups_) {
      if (std::binary_search(gr.g->ranks.begin(), gr.g->ranks.end(), peer)) {
        send.insert(send.end(), gr.own.begin(), gr.own.end());
      }
    }
  }
  return out;
}

absl::Status Converter::Combine(const std::map<int32_t, std::vector<float>>& received) {
  // Every group's max over its holders.
  std::map<int32_t, int64_t> pos;
  for (const auto& [peer, count] : peer_count_) {
    auto it = received.find(peer);
    if (it == received.end() || static_cast<int64_t>(it->second.size()) != count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer rank ", rank_, ": expected ", count,
          " cut-tile amaxes from trainer rank ", peer));
    }
    pos[peer] = 0;
  }
  for (Group& gr : groups_) {
    for (int32_t p : gr.g->ranks) {
      if (p == rank_) continue;
      const std::vector<float>& r = received.at(p);
      int64_t& at = pos[p];
      for (float& o : gr.own) o = std::fmax(o, r[at++]);
    }
  }
  // Cut tiles (and NVFP4 parameters) take their group's amax.
  for (Conv& v : convs_) {
    if (v.skip || !IsBlockQuantized(v.c->kind)) continue;
    const bool nvfp4 = QuantizesTo(*v.c, QuantFormat::kNvfp4);
    for (const Group& gr : groups_) {
      if (nvfp4 && gr.g->tensor == v.c->global_tensor) {
        ForEachTile(Intersect(v.experts, gr.g->tiles), [&](absl::Span<const int64_t> t) {
          v.global_amax[IndexIn(v.experts, t)] = gr.own[IndexIn(gr.g->tiles, t)];
        });
      } else if (gr.g->tensor == v.c->from.tensor && (v.has_cut || !nvfp4)) {
        ForEachTile(Intersect(v.tiles, gr.g->tiles), [&](absl::Span<const int64_t> t) {
          v.amax[IndexIn(v.tiles, t)] = gr.own[IndexIn(gr.g->tiles, t)];
        });
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Converter::Finish(ConvertOps& ops, absl::Span<char* const> buffers,
                               const std::map<int32_t, std::vector<float>>& received) {
  REFIT_RETURN_IF_ERROR(Combine(received));
  for (size_t k = 0; k < convs_.size(); ++k) {
    REFIT_RETURN_IF_ERROR(Convert(ops, buffers, static_cast<int32_t>(k)));
    convs_[k].amax.clear();
  }
  return ops.Sync();
}

int64_t Converter::RowAlign(int32_t index) const {
  const Conversion& c = *convs_[index].c;
  return IsBlockQuantized(c.kind) && !c.tile.empty() ? c.tile[0] : 1;
}

absl::Status Converter::Convert(ConvertOps& ops, absl::Span<char* const> buffers,
                                int32_t index) {
  const Box& box = convs_[index].c->from.box;
  if (box.rank() == 0) return ConvertRows(ops, buffers, index, 0, 0, true, nullptr);
  return ConvertRows(ops, buffers, index, box.origin(0), box.limit(0), true, nullptr);
}

namespace {

// What of a record rows [begin, end) of its dim 0 are: `sub`, the byte
// offsets of its values in the scratch buffers
// (codes, scales of OwnedTiles, global scales per leading index), and the
// first tile of IntersectingTiles and leading index within the record's.
struct Rows {
  Box sub;
  int64_t out = 0, scales = 0, global = 0;
  int64_t tile = 0, leading = 0;
  int64_t tiles = 0, leadings = 0;  // how many
};

int64_t CeilDivRows(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where row boundary `x` of c.from.box's dim 0 (a multiple of tile[0] or
// an end of the box) lies in scratch buffer `b` of c: codes row-major over
// the box, scales over OwnedTiles, global scales over the leading dims
// (dim 0 one of them when the box has more than 2 dims; else the one
// global scale, at 0 for every row).
int64_t RowOffset(const Conversion& c, const SideLayout& src, int32_t b, int64_t x) {
  const Box& box = c.from.box;
  if (box.rank() == 0 || b < 0) return 0;
  const int64_t rows = std::max<int64_t>(box.shape(0), 1), bytes = src.buffers[b].byte_size;
  if (b == c.scale_buffer && IsBlockQuantized(c.kind)) {
    const Box owned = OwnedTiles(box, c.tile);
    if (owned.shape(0) == 0) return 0;
    return (CeilDivRows(x, c.tile[0]) - owned.origin(0)) * (bytes / owned.shape(0));
  }
  if (b == c.global_buffer && box.rank() <= 2) return 0;
  return (x - box.origin(0)) * (bytes / rows);
}

// Rows [begin, end) of conversion `c` (begin and end on multiples of
// tile[0] or the box's ends). Whole: the record itself.
Rows RowsOf(const Conversion& c, const SideLayout& src, int64_t begin, int64_t end) {
  Rows r;
  const Box& box = c.from.box;
  r.sub = box;
  const bool block = IsBlockQuantized(c.kind);
  r.tiles = block ? UncheckedNumElements(IntersectingTiles(box, c.tile)) : 0;
  r.leadings = UncheckedNumElements(LeadingBox(box));
  if (box.rank() == 0 || (begin == box.origin(0) && end == box.limit(0))) return r;
  Box::Indices o(box.origin().begin(), box.origin().end());
  Box::Indices e(box.shape().begin(), box.shape().end());
  o[0] = begin;
  e[0] = end - begin;
  r.sub = Box::UncheckedMove(std::move(o), std::move(e));
  const int64_t rows = box.shape(0), skip = begin - box.origin(0);
  r.out = RowOffset(c, src, c.to_buffer, begin);
  r.scales = RowOffset(c, src, c.scale_buffer, begin);
  r.global = RowOffset(c, src, c.global_buffer, begin);
  if (block) {
    const Box all = IntersectingTiles(box, c.tile);
    r.tile = (begin / c.tile[0] - all.origin(0)) * (r.tiles / all.shape(0));
    r.tiles = UncheckedNumElements(IntersectingTiles(r.sub, c.tile));
  }
  if (box.rank() > 2) {  // dim 0 is a leading dim (experts)
    r.leading = skip * (r.leadings / rows);
    r.leadings = UncheckedNumElements(LeadingBox(r.sub));
  }
  return r;
}

template <typename T>
std::vector<T> Slice(const std::vector<T>& v, int64_t at, int64_t n) {
  if (v.empty()) return v;
  return std::vector<T>(v.begin() + at, v.begin() + at + n);
}

}  // namespace

std::pair<int64_t, int64_t> Converter::RowBytes(int32_t index, int32_t buffer, int64_t begin,
                                                int64_t end) const {
  const Conversion& c = *convs_[index].c;
  if (c.from.box.rank() == 0 || (buffer == c.global_buffer && c.from.box.rank() <= 2)) {
    return {0, plan_->src.buffers[buffer].byte_size};
  }
  return {RowOffset(c, plan_->src, buffer, begin), RowOffset(c, plan_->src, buffer, end)};
}

std::pair<int64_t, int64_t> Converter::RowsAt(int32_t index, int32_t buffer, int64_t lo,
                                              int64_t hi) const {
  const Conversion& c = *convs_[index].c;
  const Box& box = c.from.box;
  if (box.rank() == 0) return {0, 0};
  const int64_t align = RowAlign(index), o0 = box.origin(0), limit = box.limit(0);
  const int64_t rows = std::max<int64_t>(box.shape(0), 1);
  const int64_t bytes = plan_->src.buffers[buffer].byte_size;
  int64_t begin = o0, end = std::min(limit, (o0 / align + 1) * align);  // the first rows
  if (buffer == c.scale_buffer && IsBlockQuantized(c.kind)) {
    const Box owned = OwnedTiles(box, c.tile);
    const int64_t per = owned.shape(0) > 0 ? bytes / owned.shape(0) : 0;
    if (per > 0) {
      begin = (owned.origin(0) + lo / per) * align;
      end = (owned.origin(0) + CeilDivRows(hi, per)) * align;
    }
  } else if (buffer != c.global_buffer || box.rank() > 2) {
    const int64_t per = bytes / rows;
    if (per > 0) {
      begin = o0 + lo / per;
      end = o0 + CeilDivRows(hi, per);
    }
  }
  begin = std::max(o0, begin / align * align);
  end = std::min(limit, CeilDivRows(end, align) * align);
  return {begin, std::max(begin, end)};
}

int64_t Converter::GatherBytes(int32_t index, int64_t begin, int64_t end) const {
  const Conversion& c = *convs_[index].c;
  const Rows r = RowsOf(c, plan_->src, begin, end);
  const int64_t es = DTypeSize(c.from_dtype);
  if (IsEmpty(r.sub) || ContiguousByteRange(c.from, es, r.sub)) return 0;
  return UncheckedNumElements(r.sub) * es;
}

bool Converter::ScalesAlone(int32_t index) const {
  const Conversion& c = *convs_[index].c;
  return IsBlockQuantized(c.kind) && !QuantizesTo(c, QuantFormat::kNvfp4);
}

absl::Status Converter::ConvertRows(ConvertOps& ops, absl::Span<char* const> buffers,
                                    int32_t index, int64_t begin, int64_t end, bool codes,
                                    char* gather) {
  const Conv& v = convs_[index];
  const Conversion& c = *v.c;
  if (v.skip) return absl::OkStatus();
  const Rows r = RowsOf(c, plan_->src, begin, end);
  auto at = [&](int32_t b, int64_t offset) -> char* {
    return b >= 0 ? buffers[b] + offset : nullptr;
  };
  if (QuantizesTo(c, QuantFormat::kNvfp4)) {
    return ConvertNvfp4(ops, v, buffers, r.sub, gather, Slice(v.amax, r.tile, r.tiles),
                        Slice(v.global_amax, r.leading, r.leadings), at(c.to_buffer, r.out),
                        at(c.scale_buffer, r.scales), at(c.global_buffer, r.global));
  }
  REFIT_ASSIGN_OR_RETURN(const char* dense,
                         ops.Gather(c.from, r.sub, c.from_dtype, buffers, gather));
  if (!IsBlockQuantized(c.kind)) {
    return ops.Cast(dense, c.from_dtype, UncheckedNumElements(r.sub),
                    c.kind == ConversionKind::kNegExpF32, at(c.to_buffer, r.out));
  }
  const int32_t to = codes ? c.to_buffer : -1;
  if (!v.has_cut && to >= 0) {
    return ops.QuantizeWhole(dense, c.from_dtype, r.sub, c.tile,
                             ScaleModeOf(c.format, c.swizzle),
                             at(to, r.out), at(c.scale_buffer, r.scales),
                             absl::StrCat("tensor ", v.tensor->name, ", trainer rank ", rank_));
  }
  if (to < 0 && c.scale_buffer < 0) return absl::OkStatus();  // cut tiles' amaxes only
  std::vector<float> amax;
  if (v.has_cut) {
    amax = Slice(v.amax, r.tile, r.tiles);
  } else {  // scales only, no tile cut: the rows' own amaxes
    absl::StatusOr<std::vector<float>> a = ops.TileAmax(dense, c.from_dtype, r.sub, c.tile);
    if (!a.ok()) {
      return AnnotateStatus(a.status(), absl::StrCat("tensor ", v.tensor->name,
                                                     ", trainer rank ", rank_));
    }
    amax = *std::move(a);
  }
  return ops.Quantize(dense, c.from_dtype, r.sub, c.tile, amax,
                      ScaleModeOf(c.format, c.swizzle),
                      at(to, r.out), at(c.scale_buffer, r.scales));
}

absl::Status Converter::ConvertNvfp4(ConvertOps& ops, const Conv& v,
                                     absl::Span<char* const> buffers, const Box& sub,
                                     char* gather, const std::vector<float>& block_amax,
                                     const std::vector<float>& global_amax, char* out,
                                     char* scales, char* global_scales) {
  const Conversion& c = *v.c;
  for (size_t k = 0; k < global_amax.size() && c.recipe == Nvfp4Recipe::kModelopt; ++k) {
    if (global_amax[k] == 0.0f) {
      const Box experts = LeadingBox(sub);
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", v.tensor->name, ", trainer rank ", rank_,
          ": every value of its NVFP4 parameter",
          experts.rank() > 0 ? absl::StrCat(" (expert ", experts.origin(0) + k, ")") : "",
          " is zero; its global scale amax / 2688 would be 0, which ModelOpt's "
          "quantization divides by"));
    }
  }
  if (v.global_only) {  // the receivers quantize on pull (ModelOpt's recipe only)
    if (c.recipe != Nvfp4Recipe::kModelopt) {
      return absl::InternalError(absl::StrCat(
          "tensor ", v.tensor->name, ": quantize-on-pull follows ModelOpt's NVFP4 recipe, "
          "not ", Nvfp4RecipeName(c.recipe)));
    }
    std::vector<float> g;
    for (float a : v.global_amax) g.push_back(Nvfp4GlobalScale(a));
    REFIT_RETURN_IF_ERROR(ops.StoreF32(v.global_amax, buffers[c.to_buffer]));
    if (c.global_buffer >= 0) REFIT_RETURN_IF_ERROR(ops.StoreF32(g, buffers[c.global_buffer]));
    return absl::OkStatus();
  }
  REFIT_ASSIGN_OR_RETURN(const char* dense, ops.Gather(c.from, sub, c.from_dtype, buffers, gather));
  return AnnotateStatus(
      ops.QuantizeNvfp4(dense, c.from_dtype, sub, c.recipe,
                        v.has_cut ? block_amax : std::vector<float>{}, global_amax, out, scales,
                        global_scales),
      absl::StrCat("tensor ", v.tensor->name, ", trainer rank ", rank_));
}

namespace {

// The tile of one leading index's whole slice of `box`.
std::vector<int64_t> SliceTile(const Box& box) {
  std::vector<int64_t> t(box.rank(), 1);
  for (int d = std::max(0, box.rank() - 2); d < box.rank(); ++d) {
    t[d] = std::max<int64_t>(1, box.limit(d));
  }
  return t;
}

std::vector<int64_t> Nvfp4Tile(int rank) {
  std::vector<int64_t> t(rank, 1);
  t[rank - 1] = kNvfp4Block;
  return t;
}

class HostConvertOps : public ConvertOps {
 public:
  absl::StatusOr<const char*> Gather(const Record& r, const Box& part, DType dtype,
                                     absl::Span<char* const> buffers, char* into) override {
    const int64_t es = DTypeSize(dtype);
    REFIT_ASSIGN_OR_RETURN(const char* direct, DenseRecordData(r, part, dtype, buffers));
    if (direct != nullptr) return direct;
    if (into == nullptr) {
      dense_.resize(UncheckedNumElements(part) * es);
      into = dense_.data();
    }
    std::vector<CopyTask> tasks;
    REFIT_RETURN_IF_ERROR(AppendRecordTasks(r, es, part, 0, /*to_stream=*/true, &tasks));
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> copies,
                           ResolveTasks(tasks, buffers, {}, nullptr, into));
    RunCopiesHost(copies);
    return into;
  }
  absl::StatusOr<std::vector<float>> TileAmax(const char* dense, DType dtype,
                                              const Box& box,
                                              const std::vector<int64_t>& tile) override {
    return TileAmaxHost({dense, dtype, box}, tile);
  }
  absl::Status Quantize(const char* dense, DType dtype, const Box& box,
                        const std::vector<int64_t>& tile,
                        const std::vector<float>& amax, ScaleMode mode, char* out,
                        char* scales) override {
    QuantizeHost({dense, dtype, box}, tile, amax, mode, reinterpret_cast<uint8_t*>(out),
                 scales);
    return absl::OkStatus();
  }
  absl::StatusOr<Nvfp4Amaxes> Nvfp4Amax(const char* dense, DType dtype, const Box& box,
                                        bool blocks) override {
    Nvfp4Amaxes a;
    REFIT_ASSIGN_OR_RETURN(a.global, TileAmaxHost({dense, dtype, box}, SliceTile(box)));
    if (blocks) {
      REFIT_ASSIGN_OR_RETURN(a.block, TileAmaxHost({dense, dtype, box}, Nvfp4Tile(box.rank())));
    }
    return a;
  }
  absl::Status QuantizeNvfp4(const char* dense, DType dtype, const Box& box,
                             Nvfp4Recipe recipe, const std::vector<float>& block_amax,
                             const std::vector<float>& global_amax, char* out, char* scales,
                             char* global_scales) override {
    std::vector<float> g(global_amax.size()), kept(global_amax.size());
    if (recipe == Nvfp4Recipe::kVllm) {
      for (size_t k = 0; k < g.size(); ++k) {
        g[k] = Nvfp4VllmGlobalScale(global_amax[k]);
        kept[k] = Nvfp4VllmWeightScale2Of(g[k]);
      }
      QuantizeNvfp4VllmBoxHost({dense, dtype, box}, block_amax, g,
                               reinterpret_cast<uint8_t*>(out),
                               reinterpret_cast<uint8_t*>(scales));
    } else {
      std::vector<float> own;
      if (block_amax.empty()) {
        REFIT_ASSIGN_OR_RETURN(own, TileAmaxHost({dense, dtype, box}, Nvfp4Tile(box.rank())));
      }
      for (size_t k = 0; k < g.size(); ++k) g[k] = kept[k] = Nvfp4GlobalScale(global_amax[k]);
      QuantizeNvfp4Host({dense, dtype, box}, block_amax.empty() ? own : block_amax, g,
                        reinterpret_cast<uint8_t*>(out), reinterpret_cast<uint8_t*>(scales));
    }
    if (global_scales != nullptr) std::memcpy(global_scales, kept.data(), kept.size() * 4);
    return absl::OkStatus();
  }
  absl::Status StoreF32(absl::Span<const float> values, char* out) override {
    if (!values.empty()) std::memcpy(out, values.data(), values.size() * 4);
    return absl::OkStatus();
  }
  absl::Status Cast(const char* dense, DType dtype, int64_t n, bool neg_exp,
                    char* out) override {
    CastF32Host(dtype, dense, n, neg_exp, reinterpret_cast<float*>(out));
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  int64_t workspace_bytes() const override {
    return static_cast<int64_t>(dense_.capacity());
  }

 private:
  std::vector<char> dense_;
};

}  // namespace

absl::StatusOr<const char*> DenseRecordData(const Record& r, const Box& part, DType dtype,
                                            absl::Span<char* const> buffers) {
  auto range = ContiguousByteRange(r, DTypeSize(dtype), part);
  if (!range) return nullptr;
  const int32_t b = RecordBuffer(r, part.rank() == 0 ? 0 : part.origin(0) - r.box.origin(0));
  if (b < 0 || b >= static_cast<int32_t>(buffers.size()) || buffers[b] == nullptr) {
    return absl::InvalidArgumentError("a converted record's buffer is missing");
  }
  return static_cast<const char*>(buffers[b] + range->begin);
}

std::unique_ptr<ConvertOps> MakeHostConvertOps() {
  return std::make_unique<HostConvertOps>();
}

}  // namespace refit
