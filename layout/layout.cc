#include "layout/layout.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace refit {

DimMaps RowMajorDims(absl::Span<const int64_t> shape) {
  return SubArrayDims(shape, shape);
}

DimMaps SubArrayDims(absl::Span<const int64_t> box_shape,
                                 absl::Span<const int64_t> array_shape) {
  assert(box_shape.size() == array_shape.size());
  DimMaps dims(box_shape.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(box_shape.size()) - 1; d >= 0; --d) {
    if (box_shape[d] > 0) dims[d].splits.push_back({box_shape[d], stride});
    stride *= array_shape[d];
  }
  return dims;
}

int64_t DimOffset(const DimMap& m, int64_t rel) {
  // One split (a plain dim): rel < size, so no division is needed.
  if (m.splits.size() == 1) return rel * m.splits[0].stride;
  int64_t off = 0;
  for (int k = static_cast<int>(m.splits.size()) - 1; k >= 0; --k) {
    const DimSplit& s = m.splits[k];
    off += (rel % s.size) * s.stride;
    rel /= s.size;
  }
  return off;
}

namespace {

// Product of split sizes below `level`.
using Splits = absl::InlinedVector<DimSplit, 2>;

int64_t BlockSize(const Splits& s, int level) {
  int64_t b = 1;
  for (size_t k = level + 1; k < s.size(); ++k) b *= s[k].size;
  return b;
}

void DecomposeLevel(const Splits& s, int level, int64_t begin,
                    int64_t count, int64_t base, int64_t index_base,
                    std::vector<DimPiece>* out) {
  if (count <= 0) return;
  const int last = static_cast<int>(s.size()) - 1;
  const int64_t stride = s[level].stride;
  if (level == last) {
    out->push_back({index_base, count, base + begin * stride, {{count, stride}}});
    return;
  }
  const int64_t block = BlockSize(s, level);
  auto full_piece = [&](int64_t blk_begin, int64_t nblocks, int64_t idx) {
    DimPiece p;
    p.index_begin = idx;
    p.count = nblocks * block;
    p.offset = base + blk_begin * stride;
    p.splits.push_back({nblocks, stride});
    for (int k = level + 1; k <= last; ++k) p.splits.push_back(s[k]);
    out->push_back(std::move(p));
  };
  if (begin % block == 0 && count % block == 0) {
    full_piece(begin / block, count / block, index_base);
    return;
  }
  int64_t idx = index_base;
  if (begin % block != 0) {
    int64_t h = std::min(count, block - begin % block);
    DecomposeLevel(s, level + 1, begin % block, h, base + (begin / block) * stride,
                   idx, out);
    idx += h;
    begin += h;
    count -= h;
  }
  int64_t full = count / block;
  if (full > 0) {
    full_piece(begin / block, full, idx);
    idx += full * block;
    begin += full * block;
    count -= full * block;
  }
  if (count > 0) {
    DecomposeLevel(s, level + 1, 0, count, base + (begin / block) * stride, idx,
                   out);
  }
}

void Simplify(Splits* splits) {
  Splits out;
  for (const DimSplit& s : *splits) {
    if (s.size == 1) continue;
    if (!out.empty() && out.back().stride == s.size * s.stride) {
      out.back() = {out.back().size * s.size, s.stride};
    } else {
      out.push_back(s);
    }
  }
  if (out.empty()) out.push_back({1, 0});
  *splits = std::move(out);
}

}  // namespace

std::vector<DimPiece> DecomposeRange(const DimMap& m, int64_t begin,
                                     int64_t count) {
  std::vector<DimPiece> out;
  if (count <= 0 || m.splits.empty()) return out;
  DecomposeLevel(m.splits, 0, begin, count, 0, 0, &out);
  for (DimPiece& p : out) Simplify(&p.splits);
  return out;
}

std::string TensorPlace(const SideLayout& side, int32_t tensor) {
  for (const Record& r : side.records) {
    if (r.tensor != tensor) continue;
    if (r.buffer < 0 || r.buffer >= static_cast<int32_t>(side.buffers.size())) {
      return absl::StrCat(" (rank ", r.rank, ")");
    }
    return absl::StrCat(" (rank ", r.rank, ", parameter ", side.buffers[r.buffer].name, ")");
  }
  return "";
}

absl::Status ValidateRecord(const SideLayout& side, const Record& r) {
  if (r.tensor < 0 || r.tensor >= static_cast<int32_t>(side.tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("record on rank ", r.rank, " names tensor index ",
                     r.tensor, " of ", side.tensors.size()));
  }
  const TensorSpec& t = side.tensors[r.tensor];
  auto where = [&]() {
    std::string buf = (r.buffer >= 0 && r.buffer < static_cast<int32_t>(
                                                      side.buffers.size()))
                          ? side.buffers[r.buffer].name
                          : absl::StrCat("#", r.buffer);
    return absl::StrCat("tensor ", t.name, " box ", r.box.ToString(),
                        " on rank ", r.rank, " in buffer ", buf);
  };
  if (r.rank < 0 || r.rank >= side.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": rank is outside the world of ", side.world_size));
  }
  if (r.buffer < 0 || r.buffer >= static_cast<int32_t>(side.buffers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": no such buffer"));
  }
  if (r.buffer_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": buffer_step ", r.buffer_step, " is negative"));
  }
  // The buffers the record addresses: one, or one per dim-0 index.
  int64_t num_buffers = 1;
  if (r.buffer_step > 0) {
    if (r.box.rank() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": an indexed record needs rank >= 1"));
    }
    num_buffers = r.box.shape(0);
    int64_t last = 0;
    if (num_buffers > 0 &&
        (!CheckedMul(num_buffers - 1, int64_t{r.buffer_step}, &last) ||
         !CheckedAdd(last, int64_t{r.buffer}, &last) ||
         last >= static_cast<int64_t>(side.buffers.size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": indexed buffers ", r.buffer, " + i * ", r.buffer_step,
          " for ", num_buffers, " indices run past the ", side.buffers.size(),
          " buffers"));
    }
  }
  int64_t min_buffer_size = side.buffers[r.buffer].byte_size;
  for (int64_t i = 0; i < num_buffers; ++i) {
    const BufferSpec& bi = side.buffers[RecordBuffer(r, i)];
    if (bi.rank != r.rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": buffer ", bi.name, " belongs to rank ", bi.rank));
    }
    min_buffer_size = std::min(min_buffer_size, bi.byte_size);
  }
  if (r.box.rank() != static_cast<int>(t.shape.size()) ||
      static_cast<int>(r.dims.size()) != r.box.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": box rank ", r.box.rank(), " and ", r.dims.size(),
        " dim maps disagree with tensor rank ", t.shape.size()));
  }
  for (int d = 0; d < r.box.rank(); ++d) {
    if (r.box.origin(d) < 0 || r.box.limit(d) > t.shape[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": box is outside the tensor's shape"));
    }
  }
  const int64_t es = DTypeSize(t.dtype);
  // Extent of addressed elements (min/max offset) per dim, overflow-checked.
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    int64_t prod = 1;
    int64_t span = 0;
    for (const DimSplit& s : r.dims[d].splits) {
      if (s.size < 1 || s.stride < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": dim ", d, " has a split of size ", s.size,
            " stride ", s.stride));
      }
      int64_t term;
      if (!CheckedMul(prod, s.size, &prod) ||
          !CheckedMul(s.size - 1, s.stride, &term) ||
          !CheckedAdd(span, term, &span)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": dim ", d, " map overflows"));
      }
    }
    int64_t extent = r.box.shape(d);
    if (r.dims[d].splits.empty() ? extent != 0 : prod != extent) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": dim ", d, " splits cover ", prod, " indices but the box has ",
          extent));
    }
    if (!CheckedAdd(hi, span, &hi)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": map overflows"));
    }
  }
  if (IsEmpty(r.box)) return absl::OkStatus();
  int64_t first, last_end;
  if (r.byte_offset < 0 || !CheckedMul(lo, es, &first) ||
      !CheckedMul(hi + 1, es, &last_end) ||
      !CheckedAdd(last_end, r.byte_offset, &last_end)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": byte offset ", r.byte_offset, " is invalid"));
  }
  // (An indexed record is checked against its smallest buffer, with dim 0's
  // span included: exact when dim 0 has stride 0, as per-index buffers do.)
  if (last_end > min_buffer_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": addresses bytes up to ", last_end, " but the buffer has ",
        min_buffer_size));
  }
  return absl::OkStatus();
}

std::optional<ByteRange> ContiguousByteRange(const Record& r,
                                             int64_t elem_size,
                                             const Box& sub) {
  if (IsEmpty(sub)) return std::nullopt;
  if (r.buffer_step > 0 && sub.shape(0) > 1) return std::nullopt;
  int64_t start = 0;
  int64_t expected = 1;  // stride the next outer non-trivial dim must have
  bool plain = true;
  for (int d = 0; d < r.box.rank() && plain; ++d) {
    plain = r.dims[d].splits.size() == 1;
  }
  if (plain) {  // one split per dim: no range decomposition needed
    for (int d = r.box.rank() - 1; d >= 0; --d) {
      const int64_t stride = r.dims[d].splits[0].stride;
      start += (sub.origin(d) - r.box.origin(d)) * stride;
      if (sub.shape(d) == 1) continue;
      if (stride != expected) return std::nullopt;
      expected *= sub.shape(d);
    }
    return ByteRange{r.byte_offset + start * elem_size, expected * elem_size};
  }
  for (int d = r.box.rank() - 1; d >= 0; --d) {
    int64_t begin = sub.origin(d) - r.box.origin(d);
    std::vector<DimPiece> pieces =
        DecomposeRange(r.dims[d], begin, sub.shape(d));
    if (pieces.size() != 1 || pieces[0].splits.size() != 1) {
      return std::nullopt;
    }
    start += pieces[0].offset;
    if (sub.shape(d) == 1) continue;
    if (pieces[0].splits[0].stride != expected) return std::nullopt;
    expected *= sub.shape(d);
  }
  return ByteRange{r.byte_offset + start * elem_size, expected * elem_size};
}

namespace {

// Arithmetic runs of one dim range: offset, count, stride.
struct Run {
  int64_t offset, count, stride;
};

std::vector<Run> DimRuns(const DimMap& m, int64_t begin, int64_t count) {
  std::vector<Run> runs;
  for (const DimPiece& p : DecomposeRange(m, begin, count)) {
    // Expand all but the innermost split.
    const auto& s = p.splits;
    int64_t outer = 1;
    for (size_t k = 0; k + 1 < s.size(); ++k) outer *= s[k].size;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t off = p.offset, rem = o;
      for (int k = static_cast<int>(s.size()) - 2; k >= 0; --k) {
        off += (rem % s[k].size) * s[k].stride;
        rem /= s[k].size;
      }
      runs.push_back({off, s.back().size, s.back().stride});
    }
  }
  return runs;
}

}  // namespace

std::vector<ByteRange> ByteRuns(const Record& r, int64_t elem_size,
                                const Box& sub, int64_t max_ranges) {
  std::vector<ByteRange> out;
  if (IsEmpty(sub)) return out;
  if (auto c = ContiguousByteRange(r, elem_size, sub)) {
    out.push_back(*c);
    return out;
  }
  const int n = r.box.rank();
  std::vector<std::vector<Run>> runs(n);
  for (int d = 0; d < n; ++d) {
    runs[d] = DimRuns(r.dims[d], sub.origin(d) - r.box.origin(d), sub.shape(d));
  }
  // Innermost dim: element ranges (relative offsets, in elements).
  std::vector<ByteRange> inner;
  for (const Run& u : runs[n - 1]) {
    if (u.stride == 1 || u.count == 1) {
      inner.push_back({u.offset, u.count});
    } else {
      for (int64_t i = 0; i < u.count; ++i) inner.push_back({u.offset + i * u.stride, 1});
    }
  }
  // Odometer over outer dims' indices.
  std::vector<size_t> run_i(n, 0);
  std::vector<int64_t> idx(n, 0);
  // Ranges that continue the previous one are merged on the fly (the common
  // row-major case), so `out` usually stays short and already sorted.
  bool sorted = true;
  auto emit = [&](int64_t base) {
    for (const ByteRange& e : inner) {
      int64_t b = r.byte_offset + (base + e.begin) * elem_size;
      int64_t len = e.size * elem_size;
      if (!out.empty()) {
        ByteRange& last = out.back();
        if (last.end() == b) {
          last.size += len;
          continue;
        }
        if (b < last.end()) sorted = false;
      }
      out.push_back({b, len});
    }
  };
  while (true) {
    int64_t base = 0;
    for (int d = 0; d + 1 < n; ++d) {
      const Run& u = runs[d][run_i[d]];
      base += u.offset + idx[d] * u.stride;
    }
    emit(base);
    if (static_cast<int64_t>(out.size()) > 4 * max_ranges + 1024) {
      if (!sorted) std::sort(out.begin(), out.end());
      sorted = true;
      std::vector<ByteRange> merged;
      for (const ByteRange& x : out) {
        if (!merged.empty() && merged.back().end() >= x.begin) {
          merged.back().size = std::max(merged.back().end(), x.end()) - merged.back().begin;
        } else {
          merged.push_back(x);
        }
      }
      out.swap(merged);
      if (static_cast<int64_t>(out.size()) > max_ranges) return out;
    }
    int d = n - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < runs[d][run_i[d]].count) break;
      idx[d] = 0;
      if (++run_i[d] < runs[d].size()) break;
      run_i[d] = 0;
    }
    if (d < 0) break;
  }
  if (sorted) return out;  // emitted in order, adjacent ranges merged
  std::sort(out.begin(), out.end());
  std::vector<ByteRange> merged;
  for (const ByteRange& x : out) {
    if (!merged.empty() && merged.back().end() >= x.begin) {
      merged.back().size = std::max(merged.back().end(), x.end()) - merged.back().begin;
    } else {
      merged.push_back(x);
    }
  }
  return merged;
}

}  // namespace refit
