// DecideOnePass (see one_pass.h).
#include "plan/one_pass.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/types/span.h"

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

// Who reads the scratch buffers block conversions write (relay messages
// read engine buffers: none). A segment reads its source record's buffer,
// or, when the record is indexed (one buffer per dim-0 index, see
// ForEachBufferPart), its dim-0 slice k from the buffer of index k, for
// each k its dim-0 range covers. Kimi-K2's plans have about 18 million
// such reads; they are not listed: one walk over the segments counts, per
// record and index, the reads and the reads that fail every cell, and
// each buffer sums up the counts of the (record, index) pairs writing it.
//
// Whether a destination record is affine over a read's cells depends on
// the cell only where one of its last two dims has several splits (or a
// strided last dim); every other read's answer holds for all cells
// (AffinePerCell). Those reads are counted in the walk; the others are
// kept per record and checked per cell.
struct BufferSource {
  int32_t record = 0;
  int32_t index = -1;  // -1: the record is not indexed
};

// What AffinePerCell(dst, box of rank n, ...) answers for every cell.
enum class Verdict : uint8_t { kNever, kAlways, kByCell };

Verdict VerdictOf(const Record& r, int n) {
  if (r.buffer_step != 0 || r.dims.size() != static_cast<size_t>(n) || n < 2) {
    return Verdict::kNever;
  }
  for (int d = n - 2; d < n; ++d) {
    const absl::InlinedVector<DimSplit, 2>& splits = r.dims[d].splits;
    if (!(splits.size() == 1 && (d < n - 1 || splits[0].stride == 1))) return Verdict::kByCell;
  }
  return Verdict::kAlways;
}

// A destination record's Verdict for a box of its own rank (a box of
// another rank: kNever), in two bytes: the walk over the reads looks one
// up per read. A record of rank kRankOfRecord or more stores
// kRankOfRecord, and ReadVerdict asks the record itself.
constexpr uint8_t kRankOfRecord = 255;
struct DstVerdict {
  uint8_t rank = 0;
  Verdict verdict = Verdict::kNever;
};

// The DstVerdict of every destination record.
std::vector<DstVerdict> DstVerdicts(const Plan& plan) {
  std::vector<DstVerdict> out(plan.dst.records.size());
  for (size_t j = 0; j < out.size(); ++j) {
    const Record& d = plan.dst.records[j];
    const size_t n = d.dims.size();
    out[j].rank = static_cast<uint8_t>(std::min<size_t>(n, kRankOfRecord));
    out[j].verdict = VerdictOf(d, static_cast<int>(n));
  }
  return out;
}

// What AffinePerCell(plan.dst.records[seg.dst_record], seg.box, ...)
// answers for every cell (d: that record's DstVerdict).
Verdict ReadVerdict(const Plan& plan, const Segment& seg, const DstVerdict& d) {
  if (d.rank == kRankOfRecord) {
    return VerdictOf(plan.dst.records[seg.dst_record], seg.box.rank());
  }
  return seg.box.rank() == d.rank ? d.verdict : Verdict::kNever;
}

// Whether r is indexed: one buffer per dim-0 index.
bool Indexed(const Record& r) { return r.buffer_step != 0 && r.box.rank() > 0; }

// The dim-0 indices of r (1 when r is not indexed).
int64_t IndexCount(const Record& r) { return Indexed(r) ? r.box.shape(0) : 1; }

// A record's dim-0 origin when it is indexed, else kNotIndexed.
constexpr int64_t kNotIndexed = std::numeric_limits<int64_t>::min();
int64_t Origin0(const Record& r) { return Indexed(r) ? r.box.origin(0) : kNotIndexed; }

// What the passes over reads and buffers need of a source record.
struct SourceRecord {
  int64_t origin0 = kNotIndexed;  // Origin0
  // RecordBuffer(record, k) is buffer + k * step (step 0: one buffer).
  int32_t buffer = 0;
  int32_t step = 0;
};

// The indices [k0, k1) of a record of dim-0 origin `origin0` (Origin0) that
// segment box `box` reads, before clamping to the record's indices.
inline std::pair<int64_t, int64_t> ReadIndices(int64_t origin0, const Box& box) {
  if (origin0 == kNotIndexed || box.rank() == 0) return {0, 1};  // a rank-0 read is index 0's
  const int64_t k0 = box.origin(0) - origin0;
  return {k0, k0 + box.shape(0)};
}

// Counts one read of indices [k0, k1), clamped to [0, n), in the difference
// arrays `reads` and (when it fails) `fails`, each of n + 1 entries.
inline void MarkReads(int64_t k0, int64_t k1, int64_t n, bool ok, int32_t* reads,
                      int32_t* fails) {
  k0 = std::max<int64_t>(k0, 0);
  k1 = std::min<int64_t>(k1, n);
  if (k0 >= k1) return;
  ++reads[k0];
  --reads[k1];
  if (!ok) {
    ++fails[k0];
    --fails[k1];
  }
}

// Per segment of the plan, the engine rank its message delivers to, or -1
// for a segment of a relay message (or of none). Messages own disjoint
// segment ranges.
std::vector<int32_t> ReaderRanks(const Plan& plan) {
  std::vector<int32_t> rank(plan.segments.size(), -1);
  for (const Message& m : plan.messages) {
    if (m.relay) continue;
    std::fill(rank.begin() + m.first_segment, rank.begin() + m.first_segment + m.num_segments,
              m.dst_rank);
  }
  return rank;
}

// Calls fn(segment, dst_rank) for each segment of the plan's non-relay
// messages, in segment order (`rank`: ReaderRanks): the walk reads the
// segments sequentially (messages interleave their ranges).
template <typename Fn>
void ForEachRead(const std::vector<int32_t>& rank, Fn fn) {
  for (int32_t i = 0; i < static_cast<int32_t>(rank.size()); ++i) {
    if (rank[i] >= 0) fn(i, rank[i]);
  }
}

// Segments of plan.segments with their message's dst_rank.
struct SegmentRead {
  int32_t seg = 0;
  int32_t dst_rank = 0;
};

// Bits of ScratchReaders::buffer_reads.
enum : uint8_t {
  kRead = 1,    // a counted read reads it
  kFails = 2,   // a counted read fails every cell
  kByCell = 4,  // a record writing it has reads checked per cell
};

// Who reads the scratch buffers (see above), indexed once per plan.
struct ScratchReaders {
  // ReaderRanks of the plan.
  std::vector<int32_t> reader_rank;
  // Per source record r and dim-0 index k (one index when r is not
  // indexed): reads[count_offset[r] + k] and fails[...] count the reads
  // whose answer holds for every cell, and those of them that fail.
  std::vector<int64_t> count_offset;
  std::vector<int32_t> reads, fails;
  // The reads checked per cell, by record: by_cell[by_cell_offset[r],
  // by_cell_offset[r + 1]).
  std::vector<int64_t> by_cell_offset;
  std::vector<SegmentRead> by_cell;
  // Per source buffer, the bits above over the (record, index) pairs
  // writing it.
  std::vector<uint8_t> buffer_reads;
  // Per source record, SourceRecord.
  std::vector<SourceRecord> records;
  // Sources of buffer b (built on first use, for buffers with kByCell and
  // for BufferReaders): sources[source_offset[b], source_offset[b + 1]).
  std::vector<int32_t> source_offset;
  std::vector<BufferSource> sources;
  // Every read of record r (for BufferReaders; built on first use):
  // all[all_offset[r], all_offset[r + 1]).
  std::vector<int64_t> all_offset;
  std::vector<SegmentRead> all;
  // SourceReads' memo for records with reads checked per cell, by
  // record * 64 + CellBit.
  std::unordered_map<int64_t, std::vector<uint8_t>> record_reads;
};

// Calls fn(buffer, source) for each (record, index) pair of x: the buffer
// it writes and the pair.
template <typename Fn>
void ForEachSource(const ScratchReaders& x, Fn fn) {
  for (size_t r = 0; r < x.records.size(); ++r) {
    const SourceRecord& s = x.records[r];
    const int64_t n = x.count_offset[r + 1] - x.count_offset[r] - 1;
    for (int64_t k = 0; k < n; ++k) {
      fn(s.buffer + static_cast<int32_t>(k) * s.step,
         BufferSource{static_cast<int32_t>(r),
                      s.origin0 == kNotIndexed ? -1 : static_cast<int32_t>(k)});
    }
  }
}

// Groups `reads` (record, read) by record into offset/out, keeping order.
void GroupByRecord(const std::vector<std::pair<int32_t, SegmentRead>>& reads, size_t nrec,
                   std::vector<int64_t>* offset, std::vector<SegmentRead>* out) {
  offset->assign(nrec + 1, 0);
  for (const auto& [r, read] : reads) ++(*offset)[r + 1];
  for (size_t r = 0; r < nrec; ++r) (*offset)[r + 1] += (*offset)[r];
  out->resize(reads.size());
  std::vector<int64_t> next(offset->begin(), offset->end() - 1);
  for (const auto& [r, read] : reads) (*out)[next[r]++] = read;
}

// Sets x->records and x->count_offset (IndexCount + 1 entries per record:
// difference arrays), and sizes x->reads and x->fails.
void IndexSourceRecords(const Plan& plan, ScratchReaders* x) {
  const size_t nrec = plan.src.records.size();
  x->records.resize(nrec);
  x->count_offset.assign(nrec + 1, 0);
  for (size_t r = 0; r < nrec; ++r) {
    const Record& rec = plan.src.records[r];
    x->records[r] = {Origin0(rec), rec.buffer, rec.buffer_step > 0 ? rec.buffer_step : 0};
    x->count_offset[r + 1] = x->count_offset[r] + IndexCount(rec) + 1;
  }
  x->reads.assign(x->count_offset[nrec], 0);
  x->fails.assign(x->count_offset[nrec], 0);
}

// Counts every read whose answer holds for every cell in x->reads and
// x->fails, and lists the others in x->by_cell.
void CountReads(const Plan& plan, ScratchReaders* x) {
  const std::vector<DstVerdict> dst = DstVerdicts(plan);
  std::vector<std::pair<int32_t, SegmentRead>> by_cell;
  ForEachRead(x->reader_rank, [&](int32_t i, int32_t dst_rank) {
    const Segment& seg = plan.segments[i];
    const int32_t r = seg.src_record;
    const Verdict v = ReadVerdict(plan, seg, dst[seg.dst_record]);
    if (v == Verdict::kByCell) {
      by_cell.push_back({r, {i, dst_rank}});
      return;
    }
    const int64_t at = x->count_offset[r];
    const int64_t n = x->count_offset[r + 1] - at - 1;
    const auto [k0, k1] = ReadIndices(x->records[r].origin0, seg.box);
    MarkReads(k0, k1, n, v != Verdict::kNever, &x->reads[at], &x->fails[at]);
  });
  GroupByRecord(by_cell, x->records.size(), &x->by_cell_offset, &x->by_cell);
  // Prefix sums: counts per index.
  for (size_t r = 0; r < x->records.size(); ++r) {
    for (int64_t j = x->count_offset[r] + 1; j < x->count_offset[r + 1]; ++j) {
      x->reads[j] += x->reads[j - 1];
      x->fails[j] += x->fails[j - 1];
    }
  }
}

// Sets x->buffer_reads from the counts and the reads checked per cell.
void SumUpBuffers(const Plan& plan, ScratchReaders* x) {
  const int32_t nbuf = static_cast<int32_t>(plan.src.buffers.size());
  x->buffer_reads.assign(nbuf, 0);
  ForEachSource(*x, [&](int32_t b, const BufferSource& s) {
    if (b < 0 || b >= nbuf) return;
    const int64_t at = x->count_offset[s.record] + (s.index < 0 ? 0 : s.index);
    uint8_t bits = x->reads[at] > 0 ? kRead : 0;
    if (x->fails[at] > 0) bits |= kFails;
    if (x->by_cell_offset[s.record] != x->by_cell_offset[s.record + 1]) bits |= kByCell;
    x->buffer_reads[b] |= bits;
  });
}

ScratchReaders IndexScratchReaders(const Plan& plan) {
  ScratchReaders x;
  x.reader_rank = ReaderRanks(plan);
  IndexSourceRecords(plan, &x);
  CountReads(plan, &x);
  SumUpBuffers(plan, &x);
  return x;
}

// Lists the sources of every buffer in x->sources (once).
void IndexSources(const Plan& plan, ScratchReaders* x) {
  if (!x->source_offset.empty()) return;
  const int32_t nbuf = static_cast<int32_t>(plan.src.buffers.size());
  auto in_range = [&](int32_t b) { return b >= 0 && b < nbuf; };
  x->source_offset.assign(nbuf + 1, 0);
  ForEachSource(*x, [&](int32_t b, const BufferSource&) {
    if (in_range(b)) ++x->source_offset[b + 1];
  });
  for (int32_t b = 0; b < nbuf; ++b) x->source_offset[b + 1] += x->source_offset[b];
  x->sources.resize(x->source_offset[nbuf]);
  std::vector<int32_t> next(x->source_offset.begin(), x->source_offset.end() - 1);
  ForEachSource(*x, [&](int32_t b, const BufferSource& s) {
    if (in_range(b)) x->sources[next[b]++] = s;
  });
}

// Lists every read of every record in x->all (once).
void IndexAllReads(const Plan& plan, ScratchReaders* x) {
  if (!x->all_offset.empty()) return;
  std::vector<std::pair<int32_t, SegmentRead>> all;
  ForEachRead(x->reader_rank, [&](int32_t i, int32_t dst_rank) {
    all.push_back({plan.segments[i].src_record, {i, dst_rank}});
  });
  GroupByRecord(all, plan.src.records.size(), &x->all_offset, &x->all);
}

// The sources of buffer b (IndexSources first).
absl::Span<const BufferSource> SourcesOf(const ScratchReaders& x, int32_t b) {
  return absl::MakeConstSpan(x.sources.data() + x.source_offset[b],
                             x.source_offset[b + 1] - x.source_offset[b]);
}

// The bit of cell_r x cell_c in the memo: log2(cell_r) * 8 + log2(cell_c)
// when both are powers of two in [1, 128], else -1 (not memoized).
int CellBit(int64_t cell_r, int64_t cell_c) {
  int lr = -1, lc = -1;
  for (int k = 0; k < 8; ++k) {
    if (cell_r == (int64_t{1} << k)) lr = k;
    if (cell_c == (int64_t{1} << k)) lc = k;
  }
  return lr < 0 || lc < 0 ? -1 : lr * 8 + lc;
}

// For source record r, per dim-0 index (one entry when r is not indexed):
// 0 when no segment reads it, 1 when every read's destination record is
// affine over every cell_r x cell_c cell of the read's box, 2 when one is
// not. The box of a read is its segment's, or the segment's dim-0 slice k
// when r is indexed. AffinePerCell reads a box only through rank() and the
// origin and limit of its last two dims, so at rank >= 3 (dim 0 leading)
// every slice of a segment has its whole box's answer: one check per
// segment, spread over its dim-0 range. A rank-2 slice is checked as is.
// The reads whose answer holds for every cell come counted in x.
std::vector<uint8_t> CheckRecordReads(const Plan& plan, int32_t r, int64_t cell_r,
                                      int64_t cell_c, const ScratchReaders& x) {
  const Record& rec = plan.src.records[r];
  const bool indexed = Indexed(rec);
  const int64_t n = IndexCount(rec);
  std::vector<int32_t> read(n + 1, 0), failed(n + 1, 0);  // difference arrays
  auto mark = [&](int64_t k0, int64_t k1, bool ok) {
    MarkReads(k0, k1, n, ok, read.data(), failed.data());
  };
  for (int64_t j = x.by_cell_offset[r]; j < x.by_cell_offset[r + 1]; ++j) {
    const Segment& seg = plan.segments[x.by_cell[j].seg];
    const Record& dst = plan.dst.records[seg.dst_record];
    const Box& box = seg.box;
    if (!indexed || box.rank() >= 3 || box.rank() == 0) {
      const auto [k0, k1] = ReadIndices(Origin0(rec), box);
      mark(k0, k1, AffinePerCell(dst, box, cell_r, cell_c));
      continue;
    }
    ForEachBufferPart(rec, box, [&](int32_t, const Box& part) {
      const int64_t k = part.origin(0) - rec.box.origin(0);
      mark(k, k + 1, AffinePerCell(dst, part, cell_r, cell_c));
    });
  }
  std::vector<uint8_t> out(n, 0);
  const int32_t* counted_reads = &x.reads[x.count_offset[r]];
  const int32_t* counted_fails = &x.fails[x.count_offset[r]];
  int32_t reads = 0, fails = 0;
  for (int64_t k = 0; k < n; ++k) {
    reads += read[k];
    fails += failed[k];
    const bool any_read = reads > 0 || counted_reads[k] > 0;
    const bool any_fail = fails > 0 || counted_fails[k] > 0;
    out[k] = !any_read ? 0 : any_fail ? 2 : 1;
  }
  return out;
}

// CheckRecordReads(plan, s.record, ...) at s.index (0 when -1), memoized;
// without a read checked per cell, from the counts.
uint8_t SourceReads(const Plan& plan, const BufferSource& s, int64_t cell_r, int64_t cell_c,
                    ScratchReaders* x) {
  const int64_t k = s.index < 0 ? 0 : s.index;
  if (x->by_cell_offset[s.record] == x->by_cell_offset[s.record + 1]) {
    const int64_t at = x->count_offset[s.record] + k;
    return x->reads[at] == 0 ? 0 : x->fails[at] > 0 ? 2 : 1;
  }
  const int bit = CellBit(cell_r, cell_c);
  if (bit < 0) return CheckRecordReads(plan, s.record, cell_r, cell_c, *x)[k];
  auto it = x->record_reads.find(int64_t{s.record} * 64 + bit);
  if (it == x->record_reads.end()) {
    it = x->record_reads
             .emplace(int64_t{s.record} * 64 + bit,
                      CheckRecordReads(plan, s.record, cell_r, cell_c, *x))
             .first;
  }
  return it->second[k];
}

// What the reads of buffer b say for cell_r x cell_c cells (SourceReads'
// codes): 0 when none reads it, 2 when a read is not affine, else 1.
uint8_t BufferState(const Plan& plan, int32_t b, int64_t cell_r, int64_t cell_c,
                    ScratchReaders* x) {
  const uint8_t bits = x->buffer_reads[b];
  if ((bits & kByCell) == 0) return (bits & kFails) != 0 ? 2 : (bits & kRead) != 0 ? 1 : 0;
  IndexSources(plan, x);
  uint8_t state = 0;
  for (const BufferSource& s : SourcesOf(*x, b)) {
    state = std::max(state, SourceReads(plan, s, cell_r, cell_c, x));
    if (state == 2) break;
  }
  return state;
}

// The engine ranks reading buffer b.
std::set<int32_t> BufferReaders(const Plan& plan, int32_t b, ScratchReaders* x) {
  IndexSources(plan, x);
  IndexAllReads(plan, x);
  std::set<int32_t> ranks;
  for (const BufferSource& s : SourcesOf(*x, b)) {
    const int64_t origin0 = x->records[s.record].origin0;
    for (int64_t j = x->all_offset[s.record]; j < x->all_offset[s.record + 1]; ++j) {
      const auto [k0, k1] = ReadIndices(origin0, plan.segments[x->all[j].seg].box);
      const int64_t k = s.index < 0 ? 0 : s.index;
      if (k >= k0 && k < k1) ranks.insert(x->all[j].dst_rank);
    }
  }
  return ranks;
}

// Whether every destination reading c's codes (and its scales, unless
// `codes_only`) is affine over every cell_r x cell_c cell (codes; the
// cells' tiles for scales), and NVFP4's codes and scales have the same
// readers (an item of either needs the BF16 weight and the global amax;
// *same_readers caches that: -1 unknown, else 0 or 1).
bool ReadersAffine(const Plan& plan, const Conversion& c, int64_t cell_r, int64_t cell_c,
                   bool codes_only, ScratchReaders* x, int* same_readers) {
  const int n = c.from.box.rank();
  const int64_t tr = c.tile[n - 2], tc = c.tile[n - 1];
  const bool nvfp4 = QuantizesTo(c, QuantFormat::kNvfp4);
  const int64_t pack = nvfp4 ? 2 : 1;  // NVFP4 codes: bytes of two columns
  bool read = false;
  for (const int32_t b : {c.to_buffer, codes_only ? -1 : c.scale_buffer}) {
    if (b < 0) continue;
    const bool codes = b == c.to_buffer;
    const int64_t r_cell = codes ? cell_r : cell_r / tr;
    const int64_t c_cell = codes ? cell_c / pack : cell_c / tc;
    const uint8_t state = BufferState(plan, b, r_cell, c_cell, x);
    if (state == 2) return false;
    read = read || state != 0;
  }
  if (!read) return false;
  if (!nvfp4) return true;
  if (*same_readers < 0) {
    const std::set<int32_t> scale_readers = codes_only || c.scale_buffer < 0
                                                ? std::set<int32_t>()
                                                : BufferReaders(plan, c.scale_buffer, x);
    *same_readers = BufferReaders(plan, c.to_buffer, x) == scale_readers ? 1 : 0;
  }
  return *same_readers == 1;
}

// How many conversions ahead DecideOnePass fetches a conversion's tile.
constexpr size_t kTileLookahead = 8;

// The cell of c if it runs in one pass (see one_pass.h), else {0, 0}.
// `readers` is built (IndexScratchReaders) when a conversion first needs it.
std::pair<int32_t, int32_t> OnePassCell(const Plan& plan, const Conversion& c,
                                        std::optional<ScratchReaders>* readers) {
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
  int same_readers = -1;
  for (const int32_t cc : {128, 64, 32}) {
    for (const int32_t cr : {128, 64, 32, 16, 8, 4, 2, 1}) {
      if (cc % tc != 0 || cr % tr != 0 || (cut && tr == 1 && cc != tc)) continue;
      if (!AffinePerCell(c.from, box, cr, cc)) continue;
      if (!readers->has_value()) readers->emplace(IndexScratchReaders(plan));
      if (ReadersAffine(plan, c, cr, cc, cut, &**readers, &same_readers)) return {cr, cc};
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
  std::optional<ScratchReaders> readers;
  const size_t n = plan->conversions.size();
  for (size_t i = 0; i < n; ++i) {
    // The conversions' tiles lie apart on the heap: fetch the tile of a
    // conversion a few ahead while this one is decided.
    if (i + kTileLookahead < n) {
      __builtin_prefetch(plan->conversions[i + kTileLookahead].tile.data());
    }
    Conversion& c = plan->conversions[i];
    const std::pair<int32_t, int32_t> cell = OnePassCell(*plan, c, &readers);
    c.one_pass = cell.first > 0;
    c.one_pass_cell_rows = cell.first;
    c.one_pass_cell_cols = cell.second;
  }
}

}  // namespace refit
