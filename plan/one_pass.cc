// DecideOnePass (see one_pass.h).
#include "plan/one_pass.h"

#include <algorithm>
#include <set>
#include <utility>

#include "layout/quant_format.h"

namespace refit {
namespace {

int64_t FloorTo(int64_t x, int64_t m) { return x / m * m; }

// Whether record r is affine over every cell of `sub`: cells are
// cell_r x cell_c on the last two dims, aligned to multiples of them in
// global coordinates, single indices on the leading dims; over each, every
// dim is one arithmetic run and the last dim's stride is 1. Each dim is
// checked on its own (affinity of a box is per dim).
bool AffinePerCell(const Record& r, const Box& sub, int64_t cell_r, int64_t cell_c) {
  const int n = sub.rank();
  if (r.buffer_step != 0 || r.dims.size() != static_cast<size_t>(n) || n < 2) return false;
  for (int d = n - 2; d < n; ++d) {
    // One split is one arithmetic run over any range (the last dim's with
    // stride 1 is what a cell needs).
    const absl::InlinedVector<DimSplit, 2>& splits = r.dims[d].splits;
    if (splits.size() == 1 && (d < n - 1 || splits[0].stride == 1)) continue;
    const int64_t cell = d == n - 2 ? cell_r : cell_c;
    for (int64_t b = sub.origin(d); b < sub.limit(d); b = FloorTo(b, cell) + cell) {
      const int64_t e = std::min(FloorTo(b, cell) + cell, sub.limit(d));
      const std::vector<DimPiece> p = DecomposeRange(r.dims[d], b - r.box.origin(d), e - b);
      if (p.size() != 1 || p[0].splits.size() > 1) return false;
      if (d == n - 1 && e - b > 1 && (p[0].splits.empty() || p[0].splits[0].stride != 1)) {
        return false;
      }
    }
  }
  return true;
}

// One read of a scratch buffer: the part of segment `segment` that engine
// rank dst_rank receives from it. The part is the segment's box, or its
// dim-0 index `slice` when the segment's source record is indexed (one
// buffer per dim-0 index, see ForEachBufferPart). Kimi-K2's plans have
// about 18 million reads: they stay 12 bytes each, their boxes are built
// when checked.
struct Read {
  int32_t segment = 0;
  int32_t slice = -1;  // -1: the whole segment box
  int32_t dst_rank = 0;
};

// The reads of every scratch buffer a block conversion writes, by
// plan.src buffer index (relay messages read engine buffers: none), in
// message and segment order: reads[offset[b], offset[b + 1]) are buffer
// b's (counted, then filled into one array).
struct ScratchReadIndex {
  std::vector<int64_t> offset;  // plan.src.buffers.size() + 1 entries
  std::vector<Read> reads;
};

// Calls fn(buffer, read) for every read of a wanted scratch buffer, in
// message and segment order (the buffers ForEachBufferPart names).
template <typename Fn>
void ForEachScratchRead(const Plan& plan, const std::vector<bool>& wanted, Fn fn) {
  auto visit = [&](int32_t b, const Read& read) {
    if (b >= 0 && b < static_cast<int32_t>(wanted.size()) && wanted[b]) fn(b, read);
  };
  for (const Message& m : plan.messages) {
    if (m.relay) continue;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Box& sub = plan.segments[i].box;
      const Record& r = plan.src.records[plan.segments[i].src_record];
      if (r.buffer_step == 0 || sub.rank() == 0) {
        visit(RecordBuffer(r, sub.rank() == 0 ? 0 : sub.origin(0) - r.box.origin(0)),
              {i, -1, m.dst_rank});
        continue;
      }
      for (int64_t k = 0; k < sub.shape(0); ++k) {
        visit(RecordBuffer(r, sub.origin(0) + k - r.box.origin(0)),
              {i, static_cast<int32_t>(k), m.dst_rank});
      }
    }
  }
}

ScratchReadIndex ScratchReads(const Plan& plan) {
  const size_t nbuf = plan.src.buffers.size();
  std::vector<bool> wanted(nbuf, false);
  for (const Conversion& c : plan.conversions) {
    for (int32_t b : {c.to_buffer, c.scale_buffer}) {
      if (IsBlockQuantized(c.kind) && b >= 0 && b < static_cast<int32_t>(nbuf)) {
        wanted[b] = true;
      }
    }
  }
  ScratchReadIndex index;
  index.offset.assign(nbuf + 1, 0);
  ForEachScratchRead(plan, wanted, [&](int32_t b, const Read&) { ++index.offset[b + 1]; });
  for (size_t b = 0; b < nbuf; ++b) index.offset[b + 1] += index.offset[b];
  index.reads.resize(index.offset[nbuf]);
  std::vector<int64_t> next(index.offset.begin(), index.offset.end() - 1);
  ForEachScratchRead(plan, wanted,
                     [&](int32_t b, const Read& read) { index.reads[next[b]++] = read; });
  return index;
}

// The part of its segment that `read` names (see Read).
Box ReadPart(const Plan& plan, const Read& read) {
  const Box& sub = plan.segments[read.segment].box;
  if (read.slice < 0) return sub;
  Box::Indices o(sub.origin().begin(), sub.origin().end());
  Box::Indices e(sub.shape().begin(), sub.shape().end());
  o[0] += read.slice;
  e[0] = 1;
  return Box::Unchecked(o, e);
}

// Whether every destination reading c's codes (and its scales, unless
// `codes_only`) is affine over every cell_r x cell_c cell (codes; the
// cells' tiles for scales), and NVFP4's codes and scales have the same
// readers (an item of either needs the BF16 weight and the global amax).
bool ReadersAffine(const Plan& plan, const Conversion& c, const ScratchReadIndex& reads,
                   int64_t cell_r, int64_t cell_c, bool codes_only) {
  const int n = c.from.box.rank();
  const int64_t tr = c.tile[n - 2], tc = c.tile[n - 1];
  const bool nvfp4 = QuantizesTo(c, QuantFormat::kNvfp4);
  const int64_t pack = nvfp4 ? 2 : 1;  // NVFP4 codes: bytes of two columns
  bool read = false;
  std::set<int32_t> readers[2];
  for (const int32_t b : {c.to_buffer, codes_only ? -1 : c.scale_buffer}) {
    if (b < 0) continue;
    const bool codes = b == c.to_buffer;
    for (int64_t i = reads.offset[b]; i < reads.offset[b + 1]; ++i) {
      const Read& r = reads.reads[i];
      const Segment& s = plan.segments[r.segment];
      read = true;
      readers[codes ? 0 : 1].insert(r.dst_rank);
      if (!AffinePerCell(plan.dst.records[s.dst_record], ReadPart(plan, r),
                         codes ? cell_r : cell_r / tr, codes ? cell_c / pack : cell_c / tc)) {
        return false;
      }
    }
  }
  return read && (!nvfp4 || readers[0] == readers[1]);
}

// The cell of c if it runs in one pass (see one_pass.h), else {0, 0}.
std::pair<int32_t, int32_t> OnePassCell(const Plan& plan, const Conversion& c,
                                        const ScratchReadIndex& reads) {
  const std::pair<int32_t, int32_t> none{0, 0};
  // The one-pass kernels write row-major scales (not DeepGEMM SM100's
  // exponent bytes).
  if (!IsBlockQuantized(c.kind) || c.swizzle != ScaleSwizzle::kRowMajor) return none;
  // The receivers' NVFP4 kernels follow ModelOpt's recipe; vLLM's
  // (Nvfp4Recipe::kVllm) is quantized by the trainer.
  const int32_t nbuf = static_cast<int32_t>(plan.src.buffers.size());
  if (c.to_buffer < 0 || c.to_buffer >= nbuf || c.scale_buffer >= nbuf ||
      c.recipe != Nvfp4Recipe::kModelopt || c.from_dtype != DType::kBF16 ||
      !IsOnePassTile(c.tile) || c.from.tensor < 0 ||
      c.from.tensor >= static_cast<int32_t>(plan.src.tensors.size())) {
    return none;
  }
  const Box& box = c.from.box;
  const int n = box.rank();
  if (plan.src.tensors[c.from.tensor].shape.size() != static_cast<size_t>(n) ||
      c.tile.size() != static_cast<size_t>(n) || c.from.dims.size() != static_cast<size_t>(n)) {
    return none;
  }
  for (int d = 0; d < n; ++d) {
    if (c.from.dims[d].splits.empty() || c.from.dims[d].splits.size() > kOnePassMaxSplits) {
      return none;
    }
  }
  // Cut tiles take their scales from the owner's scratch: the requantized
  // codes would need its first scale too, and NVFP4 its block amaxes. A
  // record owning no tile has no scale scratch: only a cut one.
  const bool cut = CutsTiles(plan, c);
  if ((cut && (c.format == QuantFormat::kFp8BlockRequantUe8m0 ||
               c.format == QuantFormat::kNvfp4)) ||
      (c.scale_buffer < 0 && !cut)) {
    return none;
  }
  // The largest cell every record involved is affine over (one block
  // column for cut 1 x 32 blocks: an item's blocks then start at its
  // region's first column).
  const int64_t tr = c.tile[n - 2], tc = c.tile[n - 1];
  for (const int32_t cc : {128, 64, 32}) {
    for (const int32_t cr : {128, 64, 32, 16, 8, 4, 2, 1}) {
      if (cc % tc != 0 || cr % tr != 0 || (cut && tr == 1 && cc != tc)) continue;
      if (AffinePerCell(c.from, box, cr, cc) && ReadersAffine(plan, c, reads, cr, cc, cut)) {
        return {cr, cc};
      }
    }
  }
  return none;
}

}  // namespace

bool IsOnePassTile(const std::vector<int64_t>& tile) {
  const size_t n = tile.size();
  if (n < 2 || n > kOnePassMaxRank) return false;
  for (size_t d = 0; d + 2 < n; ++d) {
    if (tile[d] != 1) return false;
  }
  const QuantFormatRow& fp8 = QuantFormatTraits(QuantFormat::kFp8Block);
  return (tile[n - 2] == fp8.block_rows && tile[n - 1] == fp8.block_cols) ||
         (tile[n - 2] == 1 && (tile[n - 1] == kMxfp8Block || tile[n - 1] == kNvfp4Block));
}

bool CutsTiles(const Plan& plan, const Conversion& c) {
  if (c.from.tensor < 0 || c.from.tensor >= static_cast<int32_t>(plan.src.tensors.size())) {
    return false;
  }
  const std::vector<int64_t>& shape = plan.src.tensors[c.from.tensor].shape;
  const Box& box = c.from.box;
  const int n = box.rank();
  if (static_cast<int>(shape.size()) != n || static_cast<int>(c.tile.size()) != n || n < 2) {
    return false;
  }
  for (int d = n - 2; d < n; ++d) {
    const int64_t t = c.tile[d];
    if (t < 1) return false;
    if (box.origin(d) % t != 0 || (box.limit(d) % t != 0 && box.limit(d) != shape[d])) {
      return true;
    }
  }
  return false;
}

void DecideOnePass(Plan* plan) {
  const bool any = std::any_of(plan->conversions.begin(), plan->conversions.end(),
                               [](const Conversion& c) { return IsBlockQuantized(c.kind); });
  const ScratchReadIndex reads = any ? ScratchReads(*plan) : ScratchReadIndex();
  for (Conversion& c : plan->conversions) {
    const std::pair<int32_t, int32_t> cell =
        any ? OnePassCell(*plan, c, reads) : std::pair<int32_t, int32_t>{0, 0};
    c.one_pass = cell.first > 0;
    c.one_pass_cell_rows = cell.first;
    c.one_pass_cell_cols = cell.second;
  }
}

}  // namespace refit
