// Quantize-on-pull (see fused_pull.h).
#include "exec/pull/fused_pull.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/pull/fused_pull_nvfp4.h"
#include "exec/pull/fused_pull_scales.h"
#include "exec/pull/pull_program.h"
#include "exec/convert/quantize.h"
#include "plan/one_pass.h"

namespace refit {
namespace {

using fused_pull_internal::CheckNvfp4Positions;
using fused_pull_internal::Nvfp4GlobalAmaxOnly;
using fused_pull_internal::Positions;
using fused_pull_internal::QuantizeNvfp4Region;
using fused_pull_internal::SetEngineAmax;
using fused_pull_internal::SetNvfp4GlobalAmax;

// Record r's elements over `sub` (global coordinates, inside r.box) as
// offset + sum (x_d - sub.origin(d)) * stride[d] elements (relative to
// r.byte_offset / element size); nullopt when some dim of r is not one
// arithmetic run over sub, the last dim's stride is not 1, or r spans
// several buffers.
struct Affine {
  int64_t offset = 0;
  std::vector<int64_t> stride;
};
std::optional<Affine> AffineOver(const Record& r, const Box& sub) {
  if (r.buffer_step != 0 || r.dims.size() != static_cast<size_t>(sub.rank())) {
    return std::nullopt;
  }
  Affine a;
  for (int d = 0; d < sub.rank(); ++d) {
    if (sub.shape(d) <= 0) return std::nullopt;
    const std::vector<DimPiece> p =
        DecomposeRange(r.dims[d], sub.origin(d) - r.box.origin(d), sub.shape(d));
    if (p.size() != 1 || p[0].splits.size() > 1) return std::nullopt;
    a.offset += p[0].offset;
    a.stride.push_back(p[0].splits.empty() || sub.shape(d) == 1 ? 0 : p[0].splits[0].stride);
  }
  if (sub.shape(sub.rank() - 1) > 1 && a.stride.back() != 1) return std::nullopt;
  return a;
}

int64_t FloorTo(int64_t x, int64_t m) { return x / m * m; }
int64_t CeilTo(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Calls fn(buffer, part, segment) for every part of a segment of a message
// from `src` to `dst` (dst < 0: any) that reads one buffer of its source
// record.
template <typename Fn>
void ForEachSourcePart(const Plan& slice, int32_t src, int32_t dst, Fn fn) {
  for (const Message& m : slice.messages) {
    if (m.src_rank != src || (dst >= 0 && m.dst_rank != dst)) continue;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = slice.segments[i];
      ForEachBufferPart(slice.src.records[s.src_record], s.box,
                        [&](int32_t b, const Box& part) { fn(m, s, b, part); });
    }
  }
}

// Region bounds of one item on the last two dims, global coordinates.
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  bool Contains(const Rect& o) const {
    return r0 <= o.r0 && o.r1 <= r1 && c0 <= o.c0 && o.c1 <= c1;
  }
};

// Calls fn(lead) for every combination of the leading dims (all but the
// last two) of `box`.
template <typename Fn>
void ForEachLead(const Box& box, Fn fn) {
  const int n = box.rank();
  std::vector<int64_t> x(box.origin().begin(), box.origin().end());
  while (true) {
    fn(x);
    int d = n - 3;
    for (; d >= 0; --d) {
      if (++x[d] < box.limit(d)) break;
      x[d] = box.origin(d);
    }
    if (d < 0) return;
  }
}

// The box of one item's region: point `x` on the leading dims, `rect` on
// the last two.
Box RegionBox(std::vector<int64_t> x, const Rect& rect) {
  const int n = static_cast<int>(x.size());
  std::vector<int64_t> shape(n, 1);
  x[n - 2] = rect.r0;
  x[n - 1] = rect.c0;
  shape[n - 2] = rect.r1 - rect.r0;
  shape[n - 1] = rect.c1 - rect.c0;
  return Box::Unchecked(x, shape);
}

// The source record a FusedSource describes (validated by the caller).
Record SourceRecord(const FusedSource& f) {
  Record r;
  std::vector<int64_t> origin(f.origin, f.origin + f.rank), shape(f.shape, f.shape + f.rank);
  r.box = Box::Unchecked(origin, shape);
  r.byte_offset = f.byte_offset;
  for (int d = 0; d < f.rank; ++d) {
    DimMap m;
    for (int k = 0; k < f.splits[d]; ++k) m.splits.push_back({f.split_size[d][k], f.split_stride[d][k]});
    r.dims.push_back(std::move(m));
  }
  return r;
}

class ItemBuilder {
 public:
  ItemBuilder(const Plan& slice, FusedProgram* out) : slice_(slice), out_(out) {}

  // Items writing the codes of `part` (of segment s).
  absl::Status Codes(int32_t src_rank, int32_t src_buffer, const FusedSource& f,
                     const Record& from, const Segment& s, const Box& part) {
    const Record& d = slice_.dst.records[s.dst_record];
    const int n = part.rank();
    if (n != f.rank || DTypeSize(slice_.dst.tensors[d.tensor].dtype) != 1) {
      return Bad(s, "its codes destination is not an e4m3 record");
    }
    const int64_t tr = f.tile[n - 2], tc = f.tile[n - 1];
    const Rect fr = FromRect(f);
    // NVFP4: `part` and the destination count bytes of two columns.
    const int64_t pack = f.format == static_cast<int32_t>(QuantFormat::kNvfp4) ? 2 : 1;
    const Rect seg{part.origin(n - 2), part.limit(n - 2), pack * part.origin(n - 1),
                   pack * part.limit(n - 1)};
    absl::Status st;
    ForEachLead(part, [&](const std::vector<int64_t>& x) {
      const int64_t cr = f.cell_r, cc = f.cell_c;
      for (int64_t i = FloorTo(seg.r0, cr); i < seg.r1 && st.ok(); i += cr) {
        for (int64_t j = FloorTo(seg.c0, cc); j < seg.c1 && st.ok(); j += cc) {
          Rect reg{std::max(i, fr.r0), std::min(i + cr, fr.r1), std::max(j, fr.c0),
                   std::min(j + cc, fr.c1)};
          if (tr == 1) {  // 1 x 32 blocks: only the rows and blocks needed
            reg.r0 = std::max(reg.r0, seg.r0);
            reg.r1 = std::min(reg.r1, seg.r1);
            reg.c0 = std::max(reg.c0, FloorTo(seg.c0, tc));
            reg.c1 = std::min(reg.c1, CeilTo(seg.c1, tc));
          }
          const Rect w{std::max(reg.r0, seg.r0), std::min(reg.r1, seg.r1),
                       std::max(reg.c0, seg.c0), std::min(reg.c1, seg.c1)};
          const Box wb = RegionBox(x, {w.r0, w.r1, w.c0 / pack, w.c1 / pack});
          const std::optional<Affine> da = AffineOver(d, wb);
          if (!da) {
            st = Bad(s, "its codes destination is not affine over a cell");
            return;
          }
          absl::StatusOr<FusedItem*> it = NewItem(src_rank, src_buffer, f, from, x, reg, i, j);
          if (!it.ok()) {
            st = it.status();
            return;
          }
          (*it)->dst_buffer = d.buffer;
          (*it)->dst_offset = d.byte_offset + da->offset;
          (*it)->dst_pitch = da->stride[n - 2];
          (*it)->w_r0 = static_cast<int32_t>(w.r0 - reg.r0);
          (*it)->w_r1 = static_cast<int32_t>(w.r1 - reg.r0);
          (*it)->w_c0 = static_cast<int32_t>(w.c0 - reg.c0);
          (*it)->w_c1 = static_cast<int32_t>(w.c1 - reg.c0);
          out_->bytes += (w.r1 - w.r0) * (w.c1 - w.c0) / pack;
        }
      }
    });
    return st;
  }

  // The scales of `part` (tile coordinates, of segment s): on the item
  // that reads their tiles, or on items of their own.
  absl::Status Scales(int32_t src_rank, int32_t src_buffer, const FusedSource& f,
                      const Record& from, const Segment& s, const Box& part) {
    const Record& d = slice_.dst.records[s.dst_record];
    const int n = part.rank();
    const int64_t es = ScaleElementBytes(static_cast<QuantFormat>(f.format));
    if (n != f.rank || DTypeSize(slice_.dst.tensors[d.tensor].dtype) != es) {
      return Bad(s, "its scales destination is not a record of scale elements");
    }
    const int64_t tr = f.tile[n - 2], tc = f.tile[n - 1];
    const int64_t cell_r = f.cell_r / tr, cell_c = f.cell_c / tc;  // tiles per cell
    const Rect fr = FromRect(f);
    const Rect seg{part.origin(n - 2), part.limit(n - 2), part.origin(n - 1),
                   part.limit(n - 1)};
    absl::Status st;
    ForEachLead(part, [&](const std::vector<int64_t>& x) {
      for (int64_t ti = FloorTo(seg.r0, cell_r); ti < seg.r1 && st.ok(); ti += cell_r) {
        for (int64_t tj = FloorTo(seg.c0, cell_c); tj < seg.c1 && st.ok(); tj += cell_c) {
          const Rect t{std::max(ti, seg.r0), std::min(ti + cell_r, seg.r1),
                       std::max(tj, seg.c0), std::min(tj + cell_c, seg.c1)};
          const Rect need{std::max(t.r0 * tr, fr.r0), std::min(t.r1 * tr, fr.r1),
                          std::max(t.c0 * tc, fr.c0), std::min(t.c1 * tc, fr.c1)};
          const int64_t i = ti * tr, j = tj * tc;  // the cell, in elements
          const std::optional<Affine> da = AffineOver(d, RegionBox(x, t));
          if (!da) {
            st = Bad(s, "its scales destination is not affine over a cell");
            return;
          }
          FusedItem* it = Find(src_rank, f, x, i, j, need);
          if (it == nullptr) {
            const Rect reg = tr == 1 ? need
                                     : Rect{std::max(i, fr.r0), std::min(i + f.cell_r, fr.r1),
                                            std::max(j, fr.c0), std::min(j + f.cell_c, fr.c1)};
            absl::StatusOr<FusedItem*> made = NewItem(src_rank, src_buffer, f, from, x, reg, i, j);
            if (!made.ok()) {
              st = made.status();
              return;
            }
            it = *made;
          }
          const int64_t rr0 = it->where[n - 2] / tr, rc0 = it->where[n - 1] / tc;
          it->scale_buffer = d.buffer;
          it->scale_offset = d.byte_offset + es * da->offset;
          it->scale_pitch = da->stride[n - 2];
          it->s_r0 = static_cast<int32_t>(t.r0 - rr0);
          it->s_r1 = static_cast<int32_t>(t.r1 - rr0);
          it->s_c0 = static_cast<int32_t>(t.c0 - rc0);
          it->s_c1 = static_cast<int32_t>(t.c1 - rc0);
          out_->bytes += es * (t.r1 - t.r0) * (t.c1 - t.c0);
        }
      }
    });
    return st;
  }

 private:
  using Key = std::tuple<int32_t, int32_t, std::vector<int64_t>>;  // rank, conversion, cell

  static Rect FromRect(const FusedSource& f) {
    const int n = f.rank;
    return {f.origin[n - 2], f.origin[n - 2] + f.shape[n - 2], f.origin[n - 1],
            f.origin[n - 1] + f.shape[n - 1]};
  }

  absl::Status Bad(const Segment& s, const char* what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantize-on-pull of tensor ",
        slice_.dst.tensors[slice_.dst.records[s.dst_record].tensor].name, ": ", what,
        " (the trainer and the engine hold different plans)"));
  }

  absl::StatusOr<FusedItem*> NewItem(int32_t src_rank, int32_t src_buffer, const FusedSource& f,
                                     const Record& from, const std::vector<int64_t>& x,
                                     const Rect& reg, int64_t i, int64_t j) {
    const int n = f.rank;
    const Box rb = RegionBox(x, reg);
    const std::optional<Affine> a = AffineOver(from, rb);
    if (!a || !Contains(from.box, rb)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer rank ", src_rank, ": a quantize-on-pull source is not affine over ",
          rb.ToString()));
    }
    FusedItem it;
    it.src_rank = src_rank;
    it.src_buffer = src_buffer;
    it.src_offset = f.byte_offset + 2 * a->offset;
    it.src_pitch = a->stride[n - 2];
    it.rows = static_cast<int32_t>(reg.r1 - reg.r0);
    it.cols = static_cast<int32_t>(reg.c1 - reg.c0);
    it.format = f.format;
    it.tile_r = static_cast<int32_t>(f.tile[n - 2]);
    it.tile_c = static_cast<int32_t>(f.tile[n - 1]);
    it.tensor = -1;
    it.where.assign(rb.origin().begin(), rb.origin().end());
    std::vector<int64_t> cell = it.where;
    cell[n - 2] = i;
    cell[n - 1] = j;
    index_[Key{src_rank, f.conversion, cell}].push_back(out_->items.size());
    out_->items.push_back(std::move(it));
    return &out_->items.back();
  }

  // An item of the cell that reads at least `need` and writes no scales yet.
  FusedItem* Find(int32_t src_rank, const FusedSource& f, std::vector<int64_t> x, int64_t i,
                  int64_t j, const Rect& need) {
    const int n = f.rank;
    x[n - 2] = i;
    x[n - 1] = j;
    auto k = index_.find(Key{src_rank, f.conversion, x});
    if (k == index_.end()) return nullptr;
    for (size_t idx : k->second) {
      FusedItem& it = out_->items[idx];
      const Rect reg{it.where[n - 2], it.where[n - 2] + it.rows, it.where[n - 1],
                     it.where[n - 1] + it.cols};
      if (it.scale_buffer < 0 && reg.Contains(need)) return &it;
    }
    return nullptr;
  }

  const Plan& slice_;
  FusedProgram* out_;
  std::map<Key, std::vector<size_t>> index_;
};

}  // namespace

std::set<int32_t> FusableConversions(const Plan& slice, int32_t rank,
                                     const std::function<bool(int32_t)>& pulls) {
  // The buffers of `rank` that an engine rank reads without pulling.
  std::set<int32_t> read_elsewhere;
  if (pulls) {
    ForEachSourcePart(slice, rank, -1, [&](const Message& m, const Segment&, int32_t b,
                                           const Box&) {
      if (!pulls(m.dst_rank)) read_elsewhere.insert(b);
    });
  }
  std::set<int32_t> out;
  for (size_t i = 0; i < slice.conversions.size(); ++i) {
    const Conversion& c = slice.conversions[i];
    if (c.from.rank != rank || !c.one_pass || read_elsewhere.count(c.to_buffer) > 0 ||
        (!CutsTiles(slice, c) && read_elsewhere.count(c.scale_buffer) > 0)) {
      continue;
    }
    out.insert(static_cast<int32_t>(i));
  }
  return out;
}

KeptConversions WithoutConversions(const Plan& slice, const std::set<int32_t>& fused) {
  KeptConversions out;
  out.plan = slice;
  Plan& plan = out.plan;
  plan.conversions.clear();
  auto valid = [&](int32_t b) {
    return b >= 0 && b < static_cast<int32_t>(plan.src.buffers.size());
  };
  auto keep = [&](const Conversion& c, int32_t i) {
    plan.conversions.push_back(c);
    out.from.push_back(i);
  };
  for (size_t i = 0; i < slice.conversions.size(); ++i) {
    const Conversion& c = slice.conversions[i];
    const int32_t at = static_cast<int32_t>(i);
    if (fused.count(at) == 0) {
      keep(c, at);
      continue;
    }
    if (QuantizesTo(c, QuantFormat::kNvfp4) && valid(c.to_buffer)) {
      out.global_amax.insert(static_cast<int32_t>(plan.conversions.size()));
      keep(Nvfp4GlobalAmaxOnly(c, &plan.src), at);
      continue;
    }
    const bool cut = CutsTiles(slice, c);
    if (cut) {  // scales only: the trainer still writes its scale scratch
      keep(c, at);
      plan.conversions.back().to_buffer = -1;
    }
    for (int32_t b : {c.to_buffer, cut ? -1 : c.scale_buffer}) {
      if (valid(b)) plan.src.buffers[b].scratch = false;
    }
  }
  return out;
}

std::vector<int32_t> ExportedSourceBuffers(const Plan& slice, int32_t rank, int32_t dst_rank,
                                           const std::set<int32_t>& fused) {
  std::vector<int32_t> order = PairSourceBuffers(slice, rank, dst_rank);
  for (int32_t& b : order) {
    for (int32_t i : fused) {
      const Conversion& c = slice.conversions[i];
      if (b == c.to_buffer || (b == c.scale_buffer && !CutsTiles(slice, c))) {
        // NVFP4: the scale position carries the global amaxes.
        b = QuantizesTo(c, QuantFormat::kNvfp4) && b == c.scale_buffer ? c.to_buffer
                                                                       : c.from.buffer;
        break;
      }
    }
  }
  return order;
}

std::vector<FusedSource> FusedSourcesOf(const Plan& slice, int32_t rank, int32_t dst_rank,
                                        const std::set<int32_t>& fused) {
  std::vector<FusedSource> out;
  const std::vector<int32_t> order = PairSourceBuffers(slice, rank, dst_rank);
  const std::set<int32_t> engine_amax = EngineAmaxConversions(slice, rank, fused);
  for (size_t p = 0; p < order.size(); ++p) {
    for (int32_t i : fused) {
      const Conversion& c = slice.conversions[i];
      const bool cut = CutsTiles(slice, c);
      if (order[p] != c.to_buffer && (cut || order[p] != c.scale_buffer)) continue;
      const Box& box = c.from.box;
      FusedSource f;
      f.position = static_cast<int32_t>(p);
      f.role = order[p] == c.to_buffer ? 0 : 1;
      f.cut = cut ? 1 : 0;
      f.conversion = i;
      f.format = static_cast<int32_t>(c.format);
      f.rank = box.rank();
      for (int d = 0; d < box.rank(); ++d) {
        f.tile[d] = c.tile[d];
        f.origin[d] = box.origin(d);
        f.shape[d] = box.shape(d);
        const DimMap& m = c.from.dims[d];
        f.splits[d] = static_cast<int32_t>(std::min<size_t>(m.splits.size(), kFusedMaxSplits));
        for (int k = 0; k < f.splits[d]; ++k) {
          f.split_size[d][k] = m.splits[k].size;
          f.split_stride[d][k] = m.splits[k].stride;
        }
      }
      f.cell_r = c.one_pass_cell_rows;
      f.cell_c = c.one_pass_cell_cols;
      f.byte_offset = c.from.byte_offset;
      f.buffer_bytes = slice.src.buffers[c.from.buffer].byte_size;
      if (engine_amax.count(i) > 0) SetEngineAmax(c, order, &f);
      out.push_back(f);
    }
  }
  return out;
}

absl::StatusOr<FusedProgram> BuildFusedItems(
    const Plan& slice, int32_t dst_rank,
    const std::map<int32_t, std::vector<FusedSource>>& sources) {
  FusedProgram out;
  ItemBuilder builder(slice, &out);
  CutScaleSources scales(slice, dst_rank);
  for (const auto& [src, list] : sources) {
    const std::vector<int32_t> order = PairSourceBuffers(slice, src, dst_rank);
    std::map<int32_t, const FusedSource*> by_buffer;
    Positions position;
    for (const FusedSource& f : list) {
      const QuantFormat format = static_cast<QuantFormat>(f.format);
      bool ok = f.position >= 0 && f.position < static_cast<int32_t>(order.size()) &&
                f.rank >= 2 && f.rank <= kFusedMaxRank && (f.role == 0 || f.role == 1) &&
                (f.cut == 0 || (f.cut == 1 && f.role == 0 &&
                                format != QuantFormat::kFp8BlockRequantUe8m0 &&
                                format != QuantFormat::kNvfp4 &&
                                (f.tile[f.rank - 2] != 1 || f.cell_c == f.tile[f.rank - 1])));
      if (ok) {
        std::vector<int64_t> tile(f.tile, f.tile + f.rank);
        ok = IsOnePassTile(tile) && f.cell_r >= 1 && f.cell_r <= 128 && f.cell_c >= 1 &&
             f.cell_c <= 128 && f.cell_r % f.tile[f.rank - 2] == 0 &&
             f.cell_c % f.tile[f.rank - 1] == 0;
        for (int d = 0; d < f.rank && ok; ++d) {
          int64_t product = 1;
          ok = f.shape[d] > 0 && f.splits[d] >= 1 && f.splits[d] <= kFusedMaxSplits;
          for (int k = 0; k < f.splits[d] && ok; ++k) {
            ok = f.split_size[d][k] >= 1 && f.split_stride[d][k] >= 0;
            product *= f.split_size[d][k];
          }
          ok = ok && product == f.shape[d];
        }
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine rank ", dst_rank, ": trainer rank ", src,
            " describes a malformed quantize-on-pull source at position ", f.position));
      }
      by_buffer[order[f.position]] = &f;
      out.fused_buffers.insert(order[f.position]);
      position[{f.conversion, f.role}] = order[f.position];
    }
    REFIT_RETURN_IF_ERROR(CheckNvfp4Positions(list, position, static_cast<int64_t>(order.size()),
                                              dst_rank, src));
    std::map<int32_t, Record> from;  // by buffer
    for (const auto& [b, f] : by_buffer) from[b] = SourceRecord(*f);
    absl::Status st;
    ForEachSourcePart(slice, src, dst_rank, [&](const Message&, const Segment& s, int32_t b,
                                                const Box& part) {
      auto f = by_buffer.find(b);
      if (!st.ok() || f == by_buffer.end()) return;
      const size_t first = out.items.size();
      const FusedSource& fs = *f->second;
      const bool nv = fs.format == static_cast<int32_t>(QuantFormat::kNvfp4);
      const int32_t weight = nv ? position.at({fs.conversion, 0}) : b;
      const Record& r = from[weight];
      st = fs.role == 0 ? builder.Codes(src, weight, fs, r, s, part)
                        : builder.Scales(src, weight, fs, r, s, part);
      const int32_t tensor = slice.src.records[s.src_record].tensor;
      for (size_t k = first; k < out.items.size() && st.ok(); ++k) {
        FusedItem& it = out.items[k];
        it.tensor = tensor;
        if (nv) SetNvfp4GlobalAmax(fs, position.at({fs.conversion, 1}), order, &it);
        if (fs.cut == 1) st = scales.Set(tensor, &it);
        if (!st.ok()) break;
        const int64_t last = it.src_offset + 2 * ((it.rows - 1) * it.src_pitch + it.cols);
        if (it.src_offset < 0 || last > f->second->buffer_bytes) {
          st = absl::InvalidArgumentError(absl::StrCat(
              "engine rank ", dst_rank, ": trainer rank ", src, "'s quantize-on-pull source ",
              "for tensor ", slice.src.tensors[tensor].name, " reads past its buffer (", last,
              " > ", f->second->buffer_bytes, " bytes)"));
        }
      }
    });
    REFIT_RETURN_IF_ERROR(st);
  }
  return out;
}

absl::Status RunFusedItemsHost(absl::Span<const FusedItem> items, const Plan& slice,
                               const std::map<int32_t, std::vector<const char*>>& src,
                               absl::Span<char* const> dst) {
  for (const FusedItem& it : items) {
    const char* base = src.at(it.src_rank)[it.src_buffer] + it.src_offset;
    // The region as a dense box at its global coordinates (tile-aligned).
    std::vector<uint16_t> dense(static_cast<size_t>(it.rows) * it.cols);
    for (int32_t r = 0; r < it.rows; ++r) {
      std::memcpy(&dense[static_cast<size_t>(r) * it.cols], base + 2 * r * it.src_pitch,
                  2 * static_cast<size_t>(it.cols));
    }
    const int n = static_cast<int>(it.where.size());
    std::vector<int64_t> shape(n, 1);
    shape[n - 2] = it.rows;
    shape[n - 1] = it.cols;
    const Box box = Box::Unchecked(it.where, shape);
    std::vector<int64_t> tile(n, 1);
    tile[n - 2] = it.tile_r;
    tile[n - 1] = it.tile_c;
    const HostDenseBox in{reinterpret_cast<const char*>(dense.data()), DType::kBF16, box};
    absl::StatusOr<std::vector<float>> amax = TileAmaxHost(in, tile);
    if (!amax.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantize-on-pull of trainer rank ", it.src_rank, "'s tensor ",
          slice.src.tensors[it.tensor].name, " (region at [", absl::StrJoin(it.where, ", "),
          "]): ", amax.status().message()));
    }
    const bool nv = it.format == static_cast<int32_t>(QuantFormat::kNvfp4);
    const int64_t pack = nv ? 2 : 1;  // NVFP4: two codes a byte
    const ScaleMode mode =
        ScaleModeOf(static_cast<QuantFormat>(it.format), ScaleSwizzle::kRowMajor);
    const int64_t es = nv ? 1 : ScaleElementSize(mode);  // NVFP4: e4m3 bytes
    if (it.scale_src_buffer >= 0) {  // a record cutting tiles
      QuantizeCutItemHost(it, dense.data(), src.at(it.scale_src_rank), dst);
      continue;
    }
    const int64_t tiles_r = (it.rows + it.tile_r - 1) / it.tile_r;
    const int64_t tiles_c = (it.cols + it.tile_c - 1) / it.tile_c;
    std::vector<uint8_t> codes(dense.size() / pack);
    std::vector<uint8_t> scales(tiles_r * tiles_c * es);
    if (nv) {
      QuantizeNvfp4Region(it, in, *amax, src.at(it.src_rank), codes.data(), scales.data());
    } else {
      QuantizeHost(in, tile, *amax, mode, codes.data(), scales.data());
    }
    if (it.dst_buffer >= 0) {
      char* out = dst[it.dst_buffer] + it.dst_offset;
      for (int32_t r = it.w_r0; r < it.w_r1; ++r) {
        std::memcpy(out + (r - it.w_r0) * it.dst_pitch,
                    &codes[(static_cast<size_t>(r) * it.cols + it.w_c0) / pack],
                    (it.w_c1 - it.w_c0) / pack);
      }
    }
    if (it.scale_buffer >= 0) {
      char* out = dst[it.scale_buffer] + it.scale_offset;
      for (int32_t i = it.s_r0; i < it.s_r1; ++i) {
        std::memcpy(out + (i - it.s_r0) * it.scale_pitch * es,
                    &scales[(i * tiles_c + it.s_c0) * es], (it.s_c1 - it.s_c0) * es);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
