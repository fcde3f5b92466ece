#include "common/hash.h"
#include "mapping/layout_builder.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "mapping/packed_scales.h"
#include "mapping/swizzled_scales.h"

namespace refit {

Box MakeBox(absl::Span<const int64_t> origin,
            absl::Span<const int64_t> shape) {
  return Box::Unchecked(origin, shape);
}

absl::Status CheckDivides(int64_t extent, int64_t n, absl::string_view what,
                          absl::string_view axis) {
  if (n <= 0 || extent % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " (", extent, ") is not divisible by ", axis, "=", n));
  }
  return absl::OkStatus();
}

std::vector<LocalBuffer> RankBuffers(const MappedSide& side, int32_t rank) {
  std::vector<LocalBuffer> out;
  if (rank < 0 || rank + 1 >= static_cast<int32_t>(side.rank_begin.size())) {
    return out;
  }
  for (int32_t b = side.rank_begin[rank]; b < side.rank_begin[rank + 1]; ++b) {
    const BufferSpec& spec = side.layout.buffers[b];
    const BufferInfo& info = side.buffer_info[b];
    out.push_back({spec.name, info.shape, info.dtype, spec.byte_size});
  }
  return out;
}

MappedSide RankOnly(MappedSide side, int32_t rank) {
  const int32_t ranks = static_cast<int32_t>(side.rank_begin.size()) - 1;
  const bool inside = rank >= 0 && rank < ranks;
  const int32_t begin = inside ? side.rank_begin[rank] : 0;
  const int32_t end = inside ? side.rank_begin[rank + 1] : 0;
  MappedSide out;
  out.layout.world_size = side.layout.world_size;
  out.layout.tensors = std::move(side.layout.tensors);
  out.layout.host_of_rank = std::move(side.layout.host_of_rank);
  out.layout.stage_of_rank = std::move(side.layout.stage_of_rank);
  out.layout.buffers.assign(
      std::make_move_iterator(side.layout.buffers.begin() + begin),
      std::make_move_iterator(side.layout.buffers.begin() + end));
  out.buffer_info.assign(
      std::make_move_iterator(side.buffer_info.begin() + begin),
      std::make_move_iterator(side.buffer_info.begin() + end));
  for (Record& r : side.layout.records) {
    if (!inside || r.rank != rank) continue;
    r.buffer -= begin;
    out.layout.records.push_back(std::move(r));
  }
  out.layout.records.shrink_to_fit();
  out.rank_begin.assign(side.rank_begin.size(), 0);
  for (int32_t r = rank + 1; inside && r <= ranks; ++r) {
    out.rank_begin[r] = end - begin;
  }
  return out;
}

LayoutBuilder::LayoutBuilder(const ModelTensors& model, int32_t world_size,
                             std::string side, bool derive_scales)
    : model_(model),
      side_(std::move(side)),
      derive_scales_(derive_scales),
      by_name_(0, NameHash{&out_.layout.buffers},
               NameEq{&out_.layout.buffers}) {
  out_.layout.world_size = world_size;
  out_.layout.tensors = model.tensors;
  first_buffer_.assign(world_size + 1, -1);
  first_record_.assign(world_size + 1, -1);
}

void LayoutBuilder::StartRank(int32_t rank) {
  if (current_rank_ >= 0) {
    // Reserve room for the ranks still to come as large as the last one
    // (ranks of a side look alike, or alike per pipeline stage): the
    // vectors then grow seldom and early, while a reallocation still has
    // little to copy. Unused capacity costs address space, not memory.
    const int64_t left = out_.layout.world_size - rank;
    auto reserve = [left](auto& v, int64_t last_begin) {
      const int64_t last = static_cast<int64_t>(v.size()) - last_begin;
      const int64_t need = static_cast<int64_t>(v.size()) + left * last;
      if (need > static_cast<int64_t>(v.capacity())) v.reserve(need + need / 8);
    };
    const int64_t b0 = first_buffer_[current_rank_];
    reserve(out_.layout.buffers, b0);
    reserve(out_.buffer_info, b0);
    reserve(scale_buffer_, b0);
    reserve(global_buffer_, b0);
    reserve(scale_grouped_, b0);
    reserve(swizzle_cols_, b0);
    reserve(out_.layout.records, first_record_[current_rank_]);
  }
  current_rank_ = rank;
  by_name_.clear();
  first_buffer_[rank] = static_cast<int64_t>(out_.layout.buffers.size());
  first_record_[rank] = static_cast<int64_t>(out_.layout.records.size());
}

absl::StatusOr<int32_t> LayoutBuilder::Buffer(int32_t rank,
                                              const std::string& name,
                                              std::vector<int64_t> shape,
                                              int32_t tensor,
                                              int64_t pad_begin,
                                              int64_t pad_end,
                                              int scale_parts) {
  if (rank != current_rank_) {
    if (rank < current_rank_) {
      return absl::InternalError(absl::StrCat(
          side_, ": buffers must be added in rank order (", name, ")"));
    }
    const int64_t last =
        current_rank_ < 0 ? 0
                          : static_cast<int64_t>(out_.layout.buffers.size()) -
                                first_buffer_[current_rank_];
    StartRank(rank);
    by_name_.reserve(last);  // ranks look alike: no rehash while it grows
  }
  const TensorSpec& t = model_.tensors[tensor];
  const bool scaled = derive_scales_ && model_.scale_of[tensor] >= 0;
  const bool swizzled = scaled && model_.scale_swizzle == ScaleSwizzle::kTiles128x4;
  const bool packed = model_.scale_swizzle == ScaleSwizzle::kPackedUe8m0;
  if (swizzled && shape.size() < 2) {
    return absl::InternalError(absl::StrCat(side_, ": swizzled scales of buffer ", name,
                                            " need a matrix"));
  }
  // The weight's own rows and columns, before any kernel padding.
  const std::vector<int64_t> logical = shape;
  std::vector<ByteRange> weight_padding;
  if (swizzled && model_.quant == QuantFormat::kNvfp4 && !t.stacked) {
    REFIT_RETURN_IF_ERROR(PadNvfp4Weight(rank, name, pad_end > pad_begin, &shape,
                                         &weight_padding));
  }
  auto it = by_name_.find(absl::string_view(name));
  if (it != by_name_.end()) {
    if (out_.buffer_info[*it].shape != shape) {
      return absl::InternalError(absl::StrCat(
          side_, ": buffer ", name, " on rank ", rank,
          " declared with two shapes [",
          absl::StrJoin(out_.buffer_info[*it].shape, ", "), "] and [",
          absl::StrJoin(shape, ", "), "]"));
    }
    return *it;
  }
  auto add = [&](std::string n, std::vector<int64_t> s, DType dt,
                 std::vector<ByteRange> padding) {
    int64_t e = 1;
    for (int64_t d : s) e *= d;
    BufferSpec& spec = out_.layout.buffers.emplace_back();
    spec.rank = rank;
    spec.name = std::move(n);
    spec.byte_size = e * DTypeSize(dt);
    spec.padding = std::move(padding);
    out_.buffer_info.push_back({std::move(s), dt});
    scale_buffer_.push_back(-1);
    global_buffer_.push_back(-1);
    scale_grouped_.push_back(false);
    swizzle_cols_.push_back(0);
    const int32_t idx = static_cast<int32_t>(out_.layout.buffers.size() - 1);
    by_name_.insert(idx);  // hashes the name just stored
    return idx;
  };
  // The companion scale buffer's shape, worked out before `shape` moves
  // into the weight's buffer.
  const bool grouped = scaled && model_.quant == QuantFormat::kFp8Tensor && t.stacked &&
                       shape.size() == t.shape.size();
  std::vector<int64_t> scale_shape;
  std::vector<ByteRange> scale_padding;
  int64_t swizzle_cols = 0;
  if (scaled && model_.quant == QuantFormat::kFp8Tensor) {
    // [E_local] / [E_local, parts] for grouped experts, else [parts].
    if (grouped) scale_shape.push_back(shape[0]);
    if (scale_parts > 1 || !grouped) scale_shape.push_back(scale_parts);
  } else if (scaled) {
    const int64_t br = model_.scale_block_rows(), bc = model_.scale_block_cols();
    scale_shape = logical;
    size_t r = scale_shape.size();
    scale_shape[r - 2] = (scale_shape[r - 2] + br - 1) / br;
    scale_shape[r - 1] = (scale_shape[r - 1] + bc - 1) / bc;
    if (packed) {
      // DeepGEMM on SM100: [..., words, aligned rows] int32 of the weight's
      // rows' exponents (mapping/packed_scales.h).
      const int64_t rows = logical[r - 2], cols = scale_shape[r - 1];
      int64_t lead = 1;
      for (size_t d = 0; d + 2 < r; ++d) lead *= scale_shape[d];
      scale_padding = PackedScalePadding(lead, rows, cols);
      scale_shape[r - 2] = PackedScaleWords(cols);
      scale_shape[r - 1] = PackedScaleRows(rows);
    }
    if (swizzled) {
      int64_t lead = 1;
      for (size_t d = 0; d + 2 < r; ++d) lead *= scale_shape[d];
      scale_padding = SwizzledScalePadding(lead, scale_shape[r - 2], scale_shape[r - 1]);
      scale_shape[r - 2] = (scale_shape[r - 2] + 127) / 128 * 128;
      scale_shape[r - 1] = (scale_shape[r - 1] + 3) / 4 * 4;
      swizzle_cols = scale_shape[r - 1];
      if (model_.swizzled_flat) {
        int64_t n = 1;
        for (int64_t d : scale_shape) n *= d;
        scale_shape = {n};
      }
    }
  }
  std::vector<ByteRange> padding = std::move(weight_padding);
  if (pad_end > pad_begin && !shape.empty()) {
    int64_t elems = 1;
    for (int64_t d : shape) elems *= d;
    int64_t row = elems / std::max<int64_t>(shape[0], 1) * DTypeSize(t.dtype);
    padding.push_back({pad_begin * row, (pad_end - pad_begin) * row});
  }
  std::vector<int64_t> global_shape;
  if (scaled && model_.quant == QuantFormat::kNvfp4) {
    global_shape.assign(shape.begin(), shape.end() - std::min<size_t>(2, shape.size()));
  }
  const int32_t idx = add(name, std::move(shape), t.dtype, std::move(padding));
  if (scaled) {
    const DType sdt =
        packed ? DType::kI32 : QuantFormatTraits(*model_.quant).scale_dtype;
    const int32_t sidx =
        add(IsFp8Block(*model_.quant) ? ScaleName(name) : PerTensorScaleName(name),
            std::move(scale_shape), sdt, std::move(scale_padding));
    swizzle_cols_[sidx] = swizzle_cols;
    scale_buffer_[idx] = sidx;
    scale_grouped_[sidx] = grouped;
    if (model_.quant == QuantFormat::kNvfp4) {
      global_buffer_[idx] =
          add(GlobalScaleBufferName(name), std::move(global_shape), DType::kF32, {});
    }
  }
  return idx;
}

absl::Status LayoutBuilder::PlaceOne(int32_t tensor, int32_t buffer,
                                     const Box& box,
                                     absl::Span<const DimPlace> places) {
  const TensorSpec& t = model_.tensors[tensor];
  const BufferSpec& spec = out_.layout.buffers[buffer];
  const BufferInfo& info = out_.buffer_info[buffer];
  auto where = [&]() {
    return absl::StrCat(side_, ": tensor ", DescribePart(t, box), " on rank ",
                        spec.rank, " in buffer ", spec.name);
  };
  if (info.dtype != t.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": buffer dtype ", DTypeName(info.dtype),
                     " differs from the tensor's ", DTypeName(t.dtype)));
  }
  const int rank = box.rank();
  if (static_cast<int>(places.size()) != rank ||
      static_cast<int>(info.shape.size()) > rank ||
      static_cast<int>(t.shape.size()) != rank) {
    return absl::InternalError(
        absl::StrCat(where(), ": rank of box, buffer and placement differ"));
  }
  // A buffer of lower rank (one expert of a stacked tensor) is viewed with
  // leading dims of size 1.
  const int lead = rank - static_cast<int>(info.shape.size());
  absl::InlinedVector<int64_t, 4> stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    stride[d] = stride[d + 1] * (d + 1 < lead ? 1 : info.shape[d + 1 - lead]);
  }
  for (int d = 0; d < rank; ++d) {
    const DimPlace& p = places[d];
    const int64_t n = box.shape(d);
    if (n > 0 && p.block > 0 && p.block < n && n % p.block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": dim ", d, " extent ", n,
          " is not a multiple of the interleave block ", p.block));
    }
  }
  // Built in place: a Record is large (inline index vectors).
  Record& r = out_.layout.records.emplace_back();
  r.tensor = tensor;
  r.rank = spec.rank;
  r.buffer = buffer;
  r.box = box;
  r.dims.resize(rank);
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d) {
    const DimPlace& p = places[d];
    const int64_t n = box.shape(d);
    offset += p.at * stride[d];
    if (n == 0) continue;
    if (p.block > 0 && p.block < n) {
      r.dims[d].splits.push_back({n / p.block, p.period * stride[d]});
      r.dims[d].splits.push_back({p.block, stride[d]});
    } else {
      r.dims[d].splits.push_back({n, stride[d]});
    }
  }
  r.byte_offset = offset * DTypeSize(t.dtype);
  return absl::OkStatus();
}

absl::Status LayoutBuilder::PlacePerTensorScale(int32_t tensor,
                                                int32_t buffer, const Box& box,
                                                int part) {
  if (!scaled_.insert({tensor, buffer}).second) return absl::OkStatus();
  const int32_t scale = model_.scale_of[tensor];
  const int32_t sbuf = scale_buffer_[buffer];
  const TensorSpec& t = model_.tensors[tensor];
  if (sbuf < 0) {
    return absl::InternalError(absl::StrCat(
        side_, ": FP8 tensor ", t.name, " placed in buffer ",
        out_.layout.buffers[buffer].name, " that has no scale buffer"));
  }
  const BufferInfo& info = out_.buffer_info[sbuf];
  const bool grouped = scale_grouped_[sbuf];
  // Grouped: [E_local] (one part) or [E_local, parts]; else [parts].
  const int64_t parts =
      grouped && info.shape.size() == 1 ? 1 : info.shape.back();
  if (part < 0 || part >= parts) {
    return absl::InternalError(absl::StrCat(side_, ": scale part ", part,
                                            " of ", t.name, " out of range"));
  }
  Record r;
  r.tensor = scale;
  r.rank = out_.layout.buffers[sbuf].rank;
  r.buffer = sbuf;
  if (t.stacked) {
    r.box = MakeBox({box.origin(0)}, {box.shape(0)});
    r.dims.resize(1);
    r.dims[0].splits.push_back({box.shape(0), grouped ? parts : 1});
  }
  r.byte_offset = part * DTypeSize(DType::kF32);
  out_.layout.records.push_back(std::move(r));
  return absl::OkStatus();
}

absl::Status LayoutBuilder::PlaceGlobalScale(int32_t tensor, int32_t buffer,
                                             const Box& box,
                                             absl::Span<const DimPlace> places) {
  const int32_t g = model_.global_of[tensor];
  if (g < 0) return absl::OkStatus();
  const int32_t gbuf = global_buffer_[buffer];
  const TensorSpec& t = model_.tensors[tensor];
  if (gbuf < 0) {
    return absl::InternalError(absl::StrCat(
        side_, ": NVFP4 tensor ", t.name, " placed in buffer ",
        out_.layout.buffers[buffer].name, " that has no global scale buffer"));
  }
  const int64_t first = t.stacked ? box.origin(0) : 0;
  if (!globals_placed_.insert({g, gbuf, first}).second) return absl::OkStatus();
  Record r;
  r.tensor = g;
  r.rank = out_.layout.buffers[gbuf].rank;
  r.buffer = gbuf;
  if (t.stacked) {
    const bool has_lead = !out_.buffer_info[gbuf].shape.empty();
    r.box = MakeBox({box.origin(0)}, {box.shape(0)});
    r.dims.resize(1);
    r.dims[0].splits.push_back({box.shape(0), 1});
    r.byte_offset = (has_lead ? places[0].at : 0) * DTypeSize(DType::kF32);
  }
  out_.layout.records.push_back(std::move(r));
  return absl::OkStatus();
}

absl::Status LayoutBuilder::Place(int32_t tensor, int32_t buffer,
                                  const Box& box,
                                  absl::Span<const DimPlace> places,
                                  int part) {
  REFIT_RETURN_IF_ERROR(PlaceOne(tensor, buffer, box, places));
  const int32_t scale = model_.scale_of[tensor];
  if (!derive_scales_ || scale < 0) return absl::OkStatus();
  if (model_.quant == QuantFormat::kFp8Tensor) {
    return PlacePerTensorScale(tensor, buffer, box, part);
  }
  if (model_.quant == QuantFormat::kNvfp4) {
    REFIT_RETURN_IF_ERROR(PlaceGlobalScale(tensor, buffer, box, places));
  }
  const int32_t sbuf = scale_buffer_[buffer];
  const TensorSpec& t = model_.tensors[tensor];
  if (sbuf < 0) {
    return absl::InternalError(absl::StrCat(
        side_, ": FP8 tensor ", t.name, " placed in buffer ",
        out_.layout.buffers[buffer].name, " that has no scale buffer"));
  }
  const int rank = box.rank();
  Box::Indices origin(box.origin().begin(), box.origin().end());
  Box::Indices shape(box.shape().begin(), box.shape().end());
  absl::InlinedVector<DimPlace, 4> sp(places.begin(), places.end());
  for (int d = rank - 2; d < rank; ++d) {
    const int64_t b = d == rank - 1 ? model_.scale_block_cols() : model_.scale_block_rows();
    const int64_t o = box.origin(d), lim = box.limit(d), x = t.shape[d];
    const DimPlace& p = places[d];
    const bool interleaved = p.block > 0 && p.block < box.shape(d);
    auto split = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          side_, ": FP8 tensor ", DescribePart(t, box), " on rank ",
          out_.layout.buffers[buffer].rank, " in buffer ",
          out_.layout.buffers[buffer].name, ": this layout would split a ",
          model_.scale_block_rows(), "x",
          model_.quant == QuantFormat::kNvfp4 ? "16" : absl::StrCat(model_.scale_block_cols()),
          IsFp8Block(*model_.quant) ? " weight_scale_inv" : " weight_scale",
          " block across ranks or buffers (dim ", d,
          ": ", why, ")"));
    };
    if (o % b != 0) return split(absl::StrCat("shard starts at ", o));
    if (lim % b != 0 && lim != x) return split(absl::StrCat("shard ends at ", lim));
    if (p.at % b != 0) return split(absl::StrCat("placed at buffer row ", p.at));
    if (interleaved && (p.block % b != 0 || p.period % b != 0)) {
      return split(absl::StrCat("interleaved in runs of ", p.block));
    }
    origin[d] = o / b;
    shape[d] = (lim + b - 1) / b - o / b;
    sp[d] = {p.at / b, interleaved ? p.block / b : 0,
             interleaved ? p.period / b : 0};
  }
  if (model_.scale_swizzle == ScaleSwizzle::kPackedUe8m0) {
    // One exponent per weight row: the rows as the weight's.
    origin[rank - 2] = box.origin(rank - 2);
    shape[rank - 2] = box.shape(rank - 2);
    sp[rank - 2] = places[rank - 2];
  }
  Box scale_box = Box::UncheckedMove(std::move(origin), std::move(shape));
  switch (model_.scale_swizzle) {
    case ScaleSwizzle::kTiles128x4:
      return PlaceSwizzledScale(scale, sbuf, scale_box, sp);
    case ScaleSwizzle::kPackedUe8m0:
      return PlacePackedScale(scale, sbuf, scale_box, sp);
    case ScaleSwizzle::kRowMajor:
      break;
  }
  return PlaceOne(scale, sbuf, scale_box, sp);
}

absl::Status LayoutBuilder::PadNvfp4Weight(int32_t rank, const std::string& name,
                                           bool row_padded, std::vector<int64_t>* shape,
                                           std::vector<ByteRange>* padding) const {
  const size_t r = shape->size();
  const int64_t n = (*shape)[r - 2], kb = (*shape)[r - 1];
  const int64_t np = (n + 31) / 32 * 32, kbp = (2 * kb + 31) / 32 * 16;
  if (np == n && kbp == kb) return absl::OkStatus();
  if (r != 2 || row_padded) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_, ": buffer ", name, " [", absl::StrJoin(*shape, ", "), "] on rank ", rank,
        ": kernel=flashinfer pads NVFP4 weights to multiples of 32 rows and codes "
        "(pad_nvfp4_weight_for_cutlass), which refit writes for plain matrices only"));
  }
  for (int64_t row = 0; kbp > kb && row < n; ++row) {
    padding->push_back({row * kbp + kb, kbp - kb});
  }
  if (np > n) padding->push_back({n * kbp, (np - n) * kbp});
  (*shape)[r - 2] = np;
  (*shape)[r - 1] = kbp;
  return absl::OkStatus();
}

absl::Status LayoutBuilder::PlaceSwizzledScale(int32_t scale, int32_t sbuf, const Box& box,
                                               absl::Span<const DimPlace> places) {
  const BufferInfo& info = out_.buffer_info[sbuf];
  const int rank = box.rank();
  const int64_t cp = swizzle_cols_[sbuf];
  // Leading dims of the tensor the buffer does not have (one expert of
  // stacked experts; every leading dim of a flat buffer).
  const int lead = model_.swizzled_flat ? rank - 2 : rank - static_cast<int>(info.shape.size());
  int64_t matrix = 1;  // bytes of one [Mp, Cp] matrix
  for (size_t d = model_.swizzled_flat ? 0 : info.shape.size() - 2; d < info.shape.size(); ++d) {
    matrix *= info.shape[d];
  }
  const DimPlace& pr = places[rank - 2];
  const DimPlace& pc = places[rank - 1];
  const int64_t rows = box.shape(rank - 2), cols = box.shape(rank - 1);
  if (cp <= 0 || (pr.block > 0 && pr.block < rows) || (pc.block > 0 && pc.block < cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_, ": tensor ", DescribePart(model_.tensors[scale], box), " in buffer ",
        out_.layout.buffers[sbuf].name, ": kernel=flashinfer swizzles block scales in ",
        "128 x 4 tiles; a part placed in interleaved runs is not written"));
  }
  // The leading dims: the same for every record of this part.
  absl::InlinedVector<DimMap, 4> lead_dims;
  const int64_t lead_offset = ScaleLeadDims(sbuf, box, places, lead, matrix, &lead_dims);
  for (const SwizzleRun& rr : SwizzleRowRuns(pr.at, pr.at + rows, cp)) {
    for (const SwizzleRun& cr : SwizzleColRuns(pc.at, pc.at + cols, 512)) {
      AddScaleRunRecord(scale, sbuf, box, places, rr, cr, lead_dims,
                        lead_offset + SwizzledScaleOffset(rr.at, cr.at, cp));  // one byte each
    }
  }
  return absl::OkStatus();
}

void LayoutBuilder::AddScaleRunRecord(int32_t scale, int32_t sbuf, const Box& box,
                                      absl::Span<const DimPlace> places, const SwizzleRun& rows,
                                      const SwizzleRun& cols, absl::Span<const DimMap> lead_dims,
                                      int64_t byte_offset) {
  const int rank = box.rank();
  Box::Indices origin(box.origin().begin(), box.origin().end());
  Box::Indices shape(box.shape().begin(), box.shape().end());
  origin[rank - 2] += rows.at - places[rank - 2].at;
  shape[rank - 2] = rows.n;
  origin[rank - 1] += cols.at - places[rank - 1].at;
  shape[rank - 1] = cols.n;
  Record& r = out_.layout.records.emplace_back();
  r.tensor = scale;
  r.rank = out_.layout.buffers[sbuf].rank;
  r.buffer = sbuf;
  r.box = Box::UncheckedMove(std::move(origin), std::move(shape));
  r.dims.assign(lead_dims.begin(), lead_dims.end());
  r.dims[rank - 2].splits.assign(rows.splits.begin(), rows.splits.end());
  r.dims[rank - 1].splits.assign(cols.splits.begin(), cols.splits.end());
  r.byte_offset = byte_offset;
}

int64_t LayoutBuilder::ScaleLeadDims(int32_t sbuf, const Box& box,
                                     absl::Span<const DimPlace> places, int lead,
                                     int64_t matrix,
                                     absl::InlinedVector<DimMap, 4>* dims) const {
  const BufferInfo& info = out_.buffer_info[sbuf];
  const int rank = box.rank();
  dims->assign(rank, DimMap{});
  int64_t offset = 0, stride = matrix;
  for (int d = rank - 3; d >= 0; --d) {
    const bool has = d >= lead;
    if (box.shape(d) > 0) (*dims)[d].splits.push_back({box.shape(d), has ? stride : 0});
    if (has) {
      offset += places[d].at * stride;
      stride *= info.shape[d - lead];
    }
  }
  return offset;
}

absl::Status LayoutBuilder::PlacePackedScale(int32_t scale, int32_t sbuf, const Box& box,
                                             absl::Span<const DimPlace> places) {
  const BufferInfo& info = out_.buffer_info[sbuf];
  const int rank = box.rank();
  const size_t br = info.shape.size();
  const int64_t aligned_rows = info.shape[br - 1];
  const int64_t matrix = 4 * info.shape[br - 2] * aligned_rows;  // bytes of one matrix
  const DimPlace& pr = places[rank - 2];
  const DimPlace& pc = places[rank - 1];
  const int64_t rows = box.shape(rank - 2), cols = box.shape(rank - 1);
  if ((pr.block > 0 && pr.block < rows) || (pc.block > 0 && pc.block < cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_, ": tensor ", DescribePart(model_.tensors[scale], box), " in buffer ",
        out_.layout.buffers[sbuf].name, ": kernel=deepgemm-sm100 packs scale exponents "
        "four to an int32 per row; a part placed in interleaved runs is not written"));
  }
  absl::InlinedVector<DimMap, 4> lead_dims;
  const int64_t lead_offset =
      ScaleLeadDims(sbuf, box, places, rank - static_cast<int>(br), matrix, &lead_dims);
  if (rows == 0) return absl::OkStatus();
  SwizzleRun rr;  // every row, one int32 apart
  rr.at = pr.at;
  rr.n = rows;
  rr.splits = {{rows, 4}};
  for (const SwizzleRun& cr : SwizzleColRuns(pc.at, pc.at + cols, 4 * aligned_rows)) {
    AddScaleRunRecord(scale, sbuf, box, places, rr, cr, lead_dims,
                      lead_offset + PackedScaleOffset(pr.at, cr.at, aligned_rows));
  }
  return absl::OkStatus();
}

absl::Status LayoutBuilder::PlaceAt(int32_t tensor, int32_t buffer,
                                    const Box& box,
                                    absl::Span<const int64_t> at, int part) {
  absl::InlinedVector<DimPlace, 4> places;
  for (int64_t a : at) places.push_back({a, 0, 0});
  return Place(tensor, buffer, box, places, part);
}

absl::Status LayoutBuilder::CloneRank(int32_t src_rank, int32_t dst_rank,
                                      int64_t expert_shift) {
  if (src_rank < 0 || src_rank >= dst_rank || dst_rank <= current_rank_ ||
      dst_rank >= out_.layout.world_size) {
    return absl::InternalError(absl::StrCat(
        side_, ": cannot clone rank ", src_rank, " to rank ", dst_rank));
  }
  // A rank that got no buffer has nothing to copy.
  if (first_buffer_[src_rank] < 0) return absl::OkStatus();
  // The source rank's buffers and records end where the next built rank's
  // begin (or at the end).
  int64_t buf_end = static_cast<int64_t>(out_.layout.buffers.size());
  int64_t rec_end = static_cast<int64_t>(out_.layout.records.size());
  for (int32_t r = src_rank + 1; r <= current_rank_; ++r) {
    if (first_buffer_[r] >= 0) {
      buf_end = first_buffer_[r];
      rec_end = first_record_[r];
      break;
    }
  }
  const int64_t buf_begin = first_buffer_[src_rank];
  const int64_t rec_begin = first_record_[src_rank];
  StartRank(dst_rank);  // reserves: the copies below do not reallocate
  const int64_t shift = static_cast<int64_t>(out_.layout.buffers.size()) - buf_begin;
  std::vector<BufferSpec>& buffers = out_.layout.buffers;
  for (int64_t b = buf_begin; b < buf_end; ++b) {
    buffers.push_back(buffers[b]);
    buffers.back().rank = dst_rank;
    out_.buffer_info.push_back(out_.buffer_info[b]);
    scale_buffer_.push_back(scale_buffer_[b] < 0 ? -1 : scale_buffer_[b] + shift);
    global_buffer_.push_back(global_buffer_[b] < 0 ? -1 : global_buffer_[b] + shift);
    scale_grouped_.push_back(scale_grouped_[b]);
    swizzle_cols_.push_back(swizzle_cols_[b]);
  }
  std::vector<Record>& records = out_.layout.records;
  const int64_t copy_begin = static_cast<int64_t>(records.size());
  for (int64_t i = rec_begin; i < rec_end; ++i) {
    Record& r = records.emplace_back(records[i]);
    r.rank = dst_rank;
    r.buffer += static_cast<int32_t>(shift);
    if (expert_shift != 0 && r.box.rank() > 0 &&
        model_.tensors[r.tensor].stacked) {
      Box::Indices origin(r.box.origin().begin(), r.box.origin().end());
      origin[0] += expert_shift;
      r.box = Box::UncheckedMove(
          std::move(origin),
          Box::Indices(r.box.shape().begin(), r.box.shape().end()));
    }
  }
  if (expert_shift == 0) {
    repeated_records_.push_back(
        {copy_begin, static_cast<int64_t>(records.size())});
  }
  return absl::OkStatus();
}

void LayoutBuilder::SetStage(std::vector<int32_t> stage_of_rank) {
  out_.layout.stage_of_rank = std::move(stage_of_rank);
}

void LayoutBuilder::SetHosts(int32_t gpus_per_host) {
  if (gpus_per_host <= 0) return;
  out_.layout.host_of_rank.resize(out_.layout.world_size);
  for (int32_t r = 0; r < out_.layout.world_size; ++r) {
    out_.layout.host_of_rank[r] = r / gpus_per_host;
  }
}

absl::StatusOr<MappedSide> LayoutBuilder::Finish() && {
  const SideLayout& L = out_.layout;
  // Distinct boxes per tensor (replicas repeat them), by a 64-bit hash.
  // Records CloneRank copied unchanged only repeat boxes: skipped.
  std::vector<std::vector<std::pair<uint64_t, int64_t>>> boxes(L.tensors.size());
  auto add_boxes = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Record& r = L.records[i];
      uint64_t h = kFnv1aOffset;
      for (int d = 0; d < r.box.rank(); ++d) {
        h = Fnv1a64Word(h, static_cast<uint64_t>(r.box.origin(d)));
        h = Fnv1a64Word(h, static_cast<uint64_t>(r.box.shape(d)));
      }
      boxes[r.tensor].push_back({h, UncheckedNumElements(r.box)});
    }
  };
  int64_t next = 0;
  for (const auto& [begin, end] : repeated_records_) {
    add_boxes(next, begin);
    next = end;
  }
  add_boxes(next, static_cast<int64_t>(L.records.size()));
  std::vector<std::string> missing;
  for (size_t t = 0; t < boxes.size(); ++t) {
    auto& bs = boxes[t];
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    int64_t held = 0, want = 1;
    for (const auto& b : bs) held += b.second;
    for (int64_t d : L.tensors[t].shape) want *= d;
    if (bs.empty() || held < want) {
      missing.push_back(absl::StrCat(L.tensors[t].name, " (", held, " of ",
                                     want, " elements placed)"));
    }
  }
  if (!missing.empty()) {
    if (missing.size() > 8) {
      size_t n = missing.size();
      missing.resize(8);
      missing.push_back(absl::StrCat("... ", n - 8, " more"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(side_, ": no placement for tensors: ",
                     absl::StrJoin(missing, "; ")));
  }
  // Records are not re-validated here: BuildPlan validates every record
  // (ValidateRecord), and this is the hot path of `refit plan`.
  out_.rank_begin.assign(L.world_size + 1, 0);
  for (const BufferSpec& b : L.buffers) out_.rank_begin[b.rank + 1]++;
  for (int32_t r = 0; r < L.world_size; ++r) {
    out_.rank_begin[r + 1] += out_.rank_begin[r];
  }
  return std::move(out_);
}

}  // namespace refit
