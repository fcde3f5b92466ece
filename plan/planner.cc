// BuildPlan: segments from overlaps, greedy replica balance, coalescing into
// messages, rounds under the staging budget, coverage validation and the
// fingerprint. See planner.h for the contract and the balancing rule.
#include "plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "layout/dtype.h"

namespace refit {
namespace {

constexpr int kMaxErrorLines = 50;
constexpr int64_t kMaxCoverageRuns = 1 << 20;
constexpr int64_t kMaxGridCells = 1 << 20;

std::string DstRank(int32_t r) { return absl::StrCat("engine rank ", r); }

absl::Status JoinErrors(const std::vector<std::string>& errors) {
  std::vector<std::string> lines;
  const int n = static_cast<int>(errors.size());
  for (int i = 0; i < n && i < kMaxErrorLines; ++i) lines.push_back(errors[i]);
  if (n > kMaxErrorLines) {
    lines.push_back(absl::StrCat("... and ", n - kMaxErrorLines, " more"));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

// A disjoint piece of a source tensor and the src records holding it all.
struct Piece {
  Box box;
  std::vector<int32_t> replicas;  // src record indices, by (rank, index)
  std::vector<int32_t> ranks;     // their ranks (parallel to replicas)
};

struct TensorPieces {
  std::vector<Piece> pieces;  // sorted by box
  int64_t max_extent0 = 0;    // largest dim-0 extent (for the dim-0 index)
};

// Builds the disjoint pieces of one source tensor from its records.
absl::Status BuildPieces(const SideLayout& src, const std::vector<int32_t>& recs,
                         TensorPieces* out) {
  std::vector<int32_t> order(recs);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Record& ra = src.records[a];
    const Record& rb = src.records[b];
    if (ra.box != rb.box) return ra.box < rb.box;
    if (ra.rank != rb.rank) return ra.rank < rb.rank;
    return a < b;
  });
  std::vector<Piece> distinct;
  for (int32_t i : order) {
    const Record& r = src.records[i];
    if (IsEmpty(r.box)) continue;
    if (distinct.empty() || distinct.back().box != r.box) {
      distinct.push_back(Piece{r.box, {}});
    }
    distinct.back().replicas.push_back(i);
  }
  // Overlap check between distinct boxes (sorted by origin, dim-0 sweep).
  bool overlap = false;
  const int rank = distinct.empty() ? 0 : distinct[0].box.rank();
  for (size_t i = 0; i < distinct.size() && !overlap; ++i) {
    for (size_t j = i + 1; j < distinct.size(); ++j) {
      if (rank > 0 && distinct[j].box.origin(0) >= distinct[i].box.limit(0)) {
        break;
      }
      if (Intersects(distinct[i].box, distinct[j].box)) {
        overlap = true;
        break;
      }
    }
  }
  if (overlap) {
    // Cut every dim at every box boundary; each covered grid cell becomes a
    // piece held by every record containing it. Exactly-once by design.
    std::vector<std::vector<int64_t>> cuts(rank);
    for (const Piece& p : distinct) {
      for (int d = 0; d < rank; ++d) {
        cuts[d].push_back(p.box.origin(d));
        cuts[d].push_back(p.box.limit(d));
      }
    }
    int64_t cells = 1;
    for (auto& c : cuts) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      cells *= std::max<int64_t>(1, static_cast<int64_t>(c.size()) - 1);
      if (cells > kMaxGridCells) {
        return absl::InvalidArgumentError(
            "source boxes overlap in too complex a pattern");
      }
    }
    std::vector<Piece> grid;
    for (const Piece& p : distinct) {
      // Enumerate the cells inside p.
      std::vector<std::pair<size_t, size_t>> rng(rank);
      for (int d = 0; d < rank; ++d) {
        rng[d].first = std::lower_bound(cuts[d].begin(), cuts[d].end(),
                                        p.box.origin(d)) - cuts[d].begin();
        rng[d].second = std::lower_bound(cuts[d].begin(), cuts[d].end(),
                                         p.box.limit(d)) - cuts[d].begin();
      }
      std::vector<size_t> idx(rank);
      for (int d = 0; d < rank; ++d) idx[d] = rng[d].first;
      while (true) {
        Box::Indices o(rank), s(rank);
        for (int d = 0; d < rank; ++d) {
          o[d] = cuts[d][idx[d]];
          s[d] = cuts[d][idx[d] + 1] - o[d];
        }
        grid.push_back(Piece{Box::Unchecked(o, s), p.replicas});
        int d = rank - 1;
        while (d >= 0 && ++idx[d] == rng[d].second) {
          idx[d] = rng[d].first;
          --d;
        }
        if (d < 0) break;
      }
    }
    std::sort(grid.begin(), grid.end(),
              [](const Piece& a, const Piece& b) { return a.box < b.box; });
    distinct.clear();
    for (Piece& g : grid) {
      if (!distinct.empty() && distinct.back().box == g.box) {
        auto& r = distinct.back().replicas;
        r.insert(r.end(), g.replicas.begin(), g.replicas.end());
      } else {
        distinct.push_back(std::move(g));
      }
    }
    for (Piece& p : distinct) {
      std::sort(p.replicas.begin(), p.replicas.end(), [&](int32_t a, int32_t b) {
        return std::make_pair(src.records[a].rank, a) <
               std::make_pair(src.records[b].rank, b);
      });
      p.replicas.erase(std::unique(p.replicas.begin(), p.replicas.end()),
                       p.replicas.end());
    }
  }
  for (Piece& p : distinct) {
    p.ranks.clear();
    for (int32_t ri : p.replicas) p.ranks.push_back(src.records[ri].rank);
  }
  out->pieces = std::move(distinct);
  out->max_extent0 = 0;
  for (const Piece& p : out->pieces) {
    if (p.box.rank() > 0) {
      out->max_extent0 = std::max(out->max_extent0, p.box.shape(0));
    }
  }
  return absl::OkStatus();
}

// Pieces of tp intersecting q (indices into tp.pieces).
void FindPieces(const TensorPieces& tp, const Box& q, std::vector<int32_t>* hits) {
  hits->clear();
  const auto& ps = tp.pieces;
  size_t start = 0;
  if (q.rank() > 0) {
    const int64_t lo = q.origin(0) - tp.max_extent0;
    start = std::partition_point(ps.begin(), ps.end(),
                                 [&](const Piece& p) {
                                   return p.box.origin(0) <= lo;
                                 }) - ps.begin();
  }
  for (size_t i = start; i < ps.size(); ++i) {
    if (q.rank() > 0 && ps[i].box.origin(0) >= q.limit(0)) break;
    if (Intersects(ps[i].box, q)) hits->push_back(static_cast<int32_t>(i));
  }
}

// Element offset of global index `g` (inside r.box) relative to byte_offset.
int64_t ElementOffset(const Record& r, absl::Span<const int64_t> g) {
  int64_t off = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    off += DimOffset(r.dims[d], g[d] - r.box.origin(d));
  }
  return off;
}

// Splits box into sub-boxes of at most cap bytes along the outermost dim
// with extent > 1 (recursively when one slice is still too big).
void SplitBox(const Box& box, int64_t es, int64_t cap, std::vector<Box>* out) {
  const int64_t bytes = UncheckedNumElements(box) * es;
  if (bytes <= cap) {
    out->push_back(box);
    return;
  }
  int d = 0;
  while (d < box.rank() && box.shape(d) <= 1) ++d;
  if (d == box.rank()) {  // one element bigger than cap: cannot split
    out->push_back(box);
    return;
  }
  const int64_t slice = bytes / box.shape(d);
  Box::Indices o(box.origin().begin(), box.origin().end());
  Box::Indices s(box.shape().begin(), box.shape().end());
  if (slice > cap) {
    for (int64_t i = 0; i < box.shape(d); ++i) {
      o[d] = box.origin(d) + i;
      s[d] = 1;
      SplitBox(Box::Unchecked(o, s), es, cap, out);
    }
    return;
  }
  const int64_t per = std::max<int64_t>(1, cap / slice);
  for (int64_t i = 0; i < box.shape(d); i += per) {
    o[d] = box.origin(d) + i;
    s[d] = std::min(per, box.shape(d) - i);
    out->push_back(Box::Unchecked(o, s));
  }
}

// Extends *p (the last record of its (tensor, rank)) by r when r holds the
// next dim-0 index in the next of evenly spaced buffers at the same offset
// with the same in-buffer layout (see MergeIndexedRecords).
bool ExtendIndexed(Record* p, const Record& r) {
  if (p->byte_offset != r.byte_offset || p->box.limit(0) != r.box.origin(0)) {
    return false;
  }
  for (int d = 1; d < r.box.rank(); ++d) {
    if (p->box.origin(d) != r.box.origin(d) ||
        p->box.shape(d) != r.box.shape(d) || !(p->dims[d] == r.dims[d])) {
      return false;
    }
  }
  const int64_t n = p->box.shape(0);
  int32_t step = p->buffer_step;
  if (step == 0) {
    if (n != 1 || r.buffer <= p->buffer) return false;
    step = r.buffer - p->buffer;
  } else if (p->dims[0].splits.size() != 1 ||
             p->dims[0].splits[0].stride != 0 ||
             int64_t{p->buffer} + n * step != r.buffer) {
    return false;
  }
  Box::Indices shape(p->box.shape().begin(), p->box.shape().end());
  shape[0] = n + 1;
  p->box = Box::Unchecked(p->box.origin(), shape);
  p->dims[0].splits.assign(1, DimSplit{n + 1, 0});
  p->buffer_step = step;
  return true;
}

// Merges records that hold one dim-0 index each of a tensor on one rank in
// per-index buffers (Megatron's TEGroupedMLP: one parameter per local
// expert) into indexed records (Record::buffer_step). Exact: a merged
// record addresses the same bytes as its parts. Input order is kept
// otherwise. Records must be valid.
void MergeIndexedRecords(std::vector<Record>* records) {
  std::vector<Record>& v = *records;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> last;
  size_t out = 0;  // v[0, out) is the merged prefix; out <= i
  for (size_t i = 0; i < v.size(); ++i) {
    const Record& r = v[i];
    const bool one_index =
        r.box.rank() >= 1 && r.buffer_step == 0 && r.box.shape(0) == 1;
    if (one_index) {
      auto it = last.find(std::make_pair(r.tensor, r.rank));
      if (it != last.end() && ExtendIndexed(&v[it->second], r)) continue;
    }
    // Only a one-index or indexed record can be extended by a later one
    // (merging past another record of the pair is exact all the same).
    if (one_index || r.buffer_step > 0) {
      last[std::make_pair(r.tensor, r.rank)] = static_cast<int32_t>(out);
    }
    if (out != i) v[out] = std::move(v[i]);
    ++out;
  }
  v.resize(out);
}

// If the part `sub` of record r is one contiguous byte range of one
// buffer (row-major order of sub), sets *buffer and *range.
bool SegmentRange(const Record& r, int64_t es, const Box& sub, int32_t* buffer,
                  ByteRange* range) {
  std::optional<ByteRange> c = ContiguousByteRange(r, es, sub);
  if (!c) return false;
  *buffer = RecordBuffer(r, sub.rank() > 0 ? sub.origin(0) - r.box.origin(0) : 0);
  *range = *c;
  return true;
}

// Destination coverage: in every buffer, the records' bytes must not
// overlap and, with the declared padding, must cover it. Buffers whose
// byte layout (size, padding, and every record part's offset, element size
// and dim maps) equals one already checked and found fine are skipped:
// the check depends on nothing else, and replicas and TP peers repeat the
// same few layouts thousands of times. Appends one error per problem.
void CheckCoverage(const SideLayout& dst, std::vector<std::string>* errors) {
  // Parts per buffer (CSR): (record, dim-0 index of an indexed record or -1).
  const size_t nb = dst.buffers.size();
  std::vector<int32_t> first(nb + 1, 0);
  for (const Record& r : dst.records) {
    if (IsEmpty(r.box)) continue;
    if (r.buffer_step > 0) {
      for (int64_t i = 0; i < r.box.shape(0); ++i) ++first[RecordBuffer(r, i) + 1];
    } else {
      ++first[r.buffer + 1];
    }
  }
  for (size_t b = 0; b < nb; ++b) first[b + 1] += first[b];
  std::vector<std::pair<int32_t, int32_t>> parts(first[nb]);
  {
    std::vector<int32_t> cursor(first.begin(), first.end() - 1);
    for (size_t i = 0; i < dst.records.size(); ++i) {
      const Record& r = dst.records[i];
      if (IsEmpty(r.box)) continue;
      if (r.buffer_step > 0) {
        for (int64_t k = 0; k < r.box.shape(0); ++k) {
          parts[cursor[RecordBuffer(r, k)]++] = {static_cast<int32_t>(i),
                                                 static_cast<int32_t>(k)};
        }
      } else {
        parts[cursor[r.buffer]++] = {static_cast<int32_t>(i), -1};
      }
    }
  }
  auto part_box = [&](const std::pair<int32_t, int32_t>& p) {
    const Record& r = dst.records[p.first];
    if (p.second < 0) return r.box;
    Box::Indices o(r.box.origin().begin(), r.box.origin().end());
    Box::Indices s(r.box.shape().begin(), r.box.shape().end());
    o[0] += p.second;
    s[0] = 1;
    return Box::Unchecked(o, s);
  };
  // Exact check of one buffer: sorted byte runs of every part.
  auto check = [&](size_t b) {
    const BufferSpec& buf = dst.buffers[b];
    std::vector<std::pair<ByteRange, int32_t>> rs;
    for (int32_t q = first[b]; q < first[b + 1]; ++q) {
      const Record& r = dst.records[parts[q].first];
      std::vector<ByteRange> rr =
          ByteRuns(r, DTypeSize(dst.tensors[r.tensor].dtype), part_box(parts[q]),
                   kMaxCoverageRuns);
      if (static_cast<int64_t>(rr.size()) > kMaxCoverageRuns) {
        return true;  // too fragmented to check byte by byte
      }
      for (const ByteRange& x : rr) rs.emplace_back(x, q);
    }
    std::sort(rs.begin(), rs.end(), [](const auto& x, const auto& y) {
      return std::make_tuple(x.first.begin, x.first.size, x.second) <
             std::make_tuple(y.first.begin, y.first.size, y.second);
    });
    const size_t before = errors->size();
    auto describe = [&](int32_t q) {
      const Record& r = dst.records[parts[q].first];
      return DescribePart(dst.tensors[r.tensor], part_box(parts[q]));
    };
    std::vector<ByteRange> pad(buf.padding);
    std::sort(pad.begin(), pad.end());
    auto report_gap = [&](int64_t a, int64_t e) {
      for (const ByteRange& p : pad) {  // subtract padding from [a, e)
        if (a >= e) break;
        if (p.end() <= a || p.begin >= e) continue;
        if (p.begin > a) {
          errors->push_back(absl::StrCat("unsourced bytes [", a, ", ", p.begin,
                                         ") of buffer ", buf.name, " on ",
                                         DstRank(buf.rank)));
        }
        a = std::max(a, p.end());
      }
      if (a < e) {
        errors->push_back(absl::StrCat("unsourced bytes [", a, ", ", e,
                                       ") of buffer ", buf.name, " on ",
                                       DstRank(buf.rank)));
      }
    };
    int64_t cursor = 0;
    int32_t cursor_part = -1;
    absl::flat_hash_set<std::pair<int32_t, int32_t>> reported;
    for (const auto& [br, q] : rs) {
      if (br.begin < cursor) {
        const bool self = parts[cursor_part].first == parts[q].first;
        if (reported.insert(std::make_pair(cursor_part, q)).second) {
          errors->push_back(absl::StrCat(
              self ? "record " : "records ", describe(cursor_part),
              self ? "" : absl::StrCat(" and ", describe(q)),
              self ? " overlaps itself" : " overlap", " at byte ", br.begin,
              " of buffer ", buf.name, " on ", DstRank(buf.rank)));
        }
      } else if (br.begin > cursor) {
        report_gap(cursor, br.begin);
      }
      if (br.end() > cursor) {
        cursor = br.end();
        cursor_part = q;
      }
    }
    if (cursor < buf.byte_size) report_gap(cursor, buf.byte_size);
    return errors->size() == before;
  };
  absl::flat_hash_map<std::vector<int64_t>, bool> seen;
  std::vector<int64_t> fields;                  // every part's fields
  std::vector<std::pair<uint64_t, std::pair<int32_t, int32_t>>> order;
  std::vector<int64_t> sig;
  for (size_t b = 0; b < nb; ++b) {
    const BufferSpec& buf = dst.buffers[b];
    if (first[b + 1] - first[b] == 1 && buf.padding.empty()) {
      // One record filling the whole buffer contiguously: nothing to check.
      const auto& part = parts[first[b]];
      const Record& r = dst.records[part.first];
      int32_t rb;
      ByteRange br;
      if (part.second < 0 &&
          SegmentRange(r, DTypeSize(dst.tensors[r.tensor].dtype), r.box, &rb,
                       &br) &&
          br.begin == 0 && br.size == buf.byte_size) {
        continue;
      }
    }
    fields.clear();
    order.clear();
    for (int32_t q = first[b]; q < first[b + 1]; ++q) {
      const Record& r = dst.records[parts[q].first];
      const int64_t es = DTypeSize(dst.tensors[r.tensor].dtype);
      const int32_t begin = static_cast<int32_t>(fields.size());
      const bool indexed = parts[q].second >= 0;
      fields.push_back(r.byte_offset +
                       (indexed ? es * DimOffset(r.dims[0], parts[q].second) : 0));
      fields.push_back(es);
      fields.push_back(r.box.rank());
      for (int d = indexed ? 1 : 0; d < r.box.rank(); ++d) {
        fields.push_back(static_cast<int64_t>(r.dims[d].splits.size()));
        for (const DimSplit& s : r.dims[d].splits) {
          fields.push_back(s.size);
          fields.push_back(s.stride);
        }
      }
      // Parts are ordered by (offset, a hash of their fields): equal
      // layouts give equal signatures (unequal ones never do, whatever
      // the order, since the signature holds every field).
      uint64_t h = 0;
      for (size_t f = begin; f < fields.size(); ++f) {
        h = (h ^ static_cast<uint64_t>(fields[f])) * 0x9E3779B97F4A7C15ULL;
      }
      order.push_back({h, {begin, static_cast<int32_t>(fields.size())}});
    }
    std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
      if (fields[x.second.first] != fields[y.second.first]) {
        return fields[x.second.first] < fields[y.second.first];
      }
      return x.first < y.first;
    });
    sig.clear();
    sig.push_back(buf.byte_size);
    sig.push_back(static_cast<int64_t>(buf.padding.size()));
    for (const ByteRange& p : buf.padding) {
      sig.push_back(p.begin);
      sig.push_back(p.size);
    }
    for (const auto& o : order) {
      sig.push_back(o.second.second - o.second.first);
      sig.insert(sig.end(), fields.begin() + o.second.first,
                 fields.begin() + o.second.second);
    }
    auto it = seen.find(sig);
    if (it != seen.end() && it->second) continue;
    const bool ok = check(b);
    if (it == seen.end()) seen.emplace(sig, ok);
  }
}

// Canonical serialization for the fingerprint, hashed as it is written (a
// plan of a million segments is never held as one string): words go round
// robin to four independent 64-bit multiply-rotate lanes (no dependency
// chain between consecutive words), combined and finalized with a
// murmur3-style avalanche into 128 bits; not cryptographic.
class Writer {
 public:
  void I(int64_t v) { Mix(static_cast<uint64_t>(v)); }
  void S(const std::string& v) {
    I(static_cast<int64_t>(v.size()));
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, v.data() + i, 8);
      Mix(w);
    }
    if (i < v.size()) {
      uint64_t w = 0;
      std::memcpy(&w, v.data() + i, v.size() - i);
      Mix(w);
    }
  }
  void B(const Box& b) {
    I(b.rank());
    for (int d = 0; d < b.rank(); ++d) {
      I(b.origin(d));
      I(b.shape(d));
    }
  }
  std::string Digest() const {
    const uint64_t a = Final(h_[0] ^ Rotl(h_[1], 17) ^ n_);
    const uint64_t b = Final(h_[2] ^ Rotl(h_[3], 29) ^ (n_ * 0x9E3779B97F4A7C15ULL));
    char buf[33];
    snprintf(buf, sizeof(buf), "%016llx%016llx",
             static_cast<unsigned long long>(Final(a ^ Rotl(b, 32))),
             static_cast<unsigned long long>(Final(b + a)));
    return buf;
  }

 private:
  static uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t Final(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return h;
  }
  void Mix(uint64_t v) {
    uint64_t& h = h_[n_ & 3];
    h = Rotl(h ^ (v * 0x87C37B91114253D5ULL), 31) * 0x4CF5AD432745937FULL +
        0x52DCE729;
    ++n_;
  }
  uint64_t h_[4] = {1469598103934665603ULL, 0x9E3779B97F4A7C15ULL,
                    0xC2B2AE3D27D4EB4FULL, 0x165667B19E3779F9ULL};
  uint64_t n_ = 0;
};

void WriteSide(Writer& w, const SideLayout& s) {
  w.I(s.world_size);
  w.I(s.tensors.size());
  for (const TensorSpec& t : s.tensors) {
    w.S(t.name);
    w.I(t.shape.size());
    for (int64_t x : t.shape) w.I(x);
    w.I(static_cast<int64_t>(t.dtype));
    w.I(t.stacked);
    w.I(static_cast<int64_t>(t.transform));
  }
  w.I(s.buffers.size());
  for (const BufferSpec& b : s.buffers) {
    w.I(b.rank);
    w.S(b.name);
    w.I(b.byte_size);
    w.I(b.padding.size());
    for (const ByteRange& p : b.padding) {
      w.I(p.begin);
      w.I(p.size);
    }
  }
  w.I(s.records.size());
  for (const Record& r : s.records) {
    w.I(r.tensor);
    w.I(r.rank);
    w.I(r.buffer);
    w.B(r.box);
    w.I(r.byte_offset);
    w.I(r.dims.size());
    for (const DimMap& m : r.dims) {
      w.I(m.splits.size());
      for (const DimSplit& sp : m.splits) {
        w.I(sp.size);
        w.I(sp.stride);
      }
    }
    w.I(r.buffer_step);
  }
  w.I(s.host_of_rank.size());
  for (int32_t h : s.host_of_rank) w.I(h);
  w.I(s.stage_of_rank.size());
  for (int32_t h : s.stage_of_rank) w.I(h);
}

// Conversions and cut tiles, only when there are any (the fingerprints of
// plans without conversions stay what they were).
void WriteConversions(Writer& w, const Plan& p) {
  if (p.conversions.empty() && p.cut_tiles.empty()) return;
  w.I(p.options.fp8_block);
  w.I(p.conversions.size());
  for (const Conversion& c : p.conversions) {
    w.I(static_cast<int64_t>(c.kind));
    w.I(static_cast<int64_t>(c.from_dtype));
    const Record& r = c.from;
    for (int64_t v : {int64_t{r.tensor}, int64_t{r.rank}, int64_t{r.buffer},
                      r.byte_offset, int64_t{r.buffer_step}}) {
      w.I(v);
    }
    w.B(r.box);
    for (const DimMap& m : r.dims) {
      w.I(m.splits.size());
      for (const DimSplit& sp : m.splits) {
        w.I(sp.size);
        w.I(sp.stride);
      }
    }
    w.I(c.to_buffer);
    w.I(c.scale_buffer);
    w.I(c.tile.size());
    for (int64_t t : c.tile) w.I(t);
  }
  w.I(p.cut_tiles.size());
  for (const CutTileGroup& g : p.cut_tiles) {
    w.I(g.tensor);
    w.B(g.tiles);
    w.I(g.ranks.size());
    for (int32_t r : g.ranks) w.I(r);
  }
}

}  // namespace

PlanStats ComputePlanStats(const Plan& plan) {
  PlanStats st;
  st.num_segments = static_cast<int64_t>(plan.segments.size());
  st.num_messages = static_cast<int64_t>(plan.messages.size());
  st.num_rounds = static_cast<int64_t>(plan.rounds.size());
  const int32_t S = std::max(0, plan.src.world_size);
  const int32_t D = std::max(0, plan.dst.world_size);
  const int L = std::max(1, plan.options.num_lanes);
  st.bytes_sent.assign(S, 0);
  st.bytes_received.assign(D, 0);
  st.staging_src.assign(S, 0);
  st.staging_dst.assign(D, 0);
  std::vector<int64_t> ps(int64_t{S} * L, 0), pd(int64_t{D} * L, 0);
  std::vector<int64_t> rs(S, 0), rd(D, 0);
  for (const Round& r : plan.rounds) {
    const int lane = std::min(std::max(r.lane, 0), L - 1);
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      st.total_bytes += m.bytes;
      st.bytes_sent[m.src_rank] += m.bytes;
      st.bytes_received[m.dst_rank] += m.bytes;
      if (!m.src_contiguous) rs[m.src_rank] += m.bytes;
      if (!m.dst_contiguous) rd[m.dst_rank] += m.bytes;
    }
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      int64_t& a = ps[int64_t{m.src_rank} * L + lane];
      a = std::max(a, rs[m.src_rank]);
      int64_t& b = pd[int64_t{m.dst_rank} * L + lane];
      b = std::max(b, rd[m.dst_rank]);
    }
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      rs[plan.messages[i].src_rank] = 0;
      rd[plan.messages[i].dst_rank] = 0;
    }
  }
  for (int32_t k = 0; k < S; ++k) {
    for (int l = 0; l < L; ++l) st.staging_src[k] += ps[int64_t{k} * L + l];
  }
  for (int32_t k = 0; k < D; ++k) {
    for (int l = 0; l < L; ++l) st.staging_dst[k] += pd[int64_t{k} * L + l];
  }
  return st;
}

std::string LayoutFingerprint(const SideLayout& layout) {
  Writer w;
  WriteSide(w, layout);
  return w.Digest();
}

std::string PlanFingerprint(const Plan& p) {
  Writer w;
  WriteSide(w, p.src);
  WriteSide(w, p.dst);
  for (int32_t x : p.dst_to_src_tensor) w.I(x);
  w.I(p.segments.size());
  for (const Segment& s : p.segments) {
    w.I(s.src_record);
    w.I(s.dst_record);
    w.B(s.box);
    w.I(s.bytes);
  }
  w.I(p.messages.size());
  for (const Message& m : p.messages) {
    for (int64_t v : {int64_t{m.src_rank}, int64_t{m.dst_rank}, int64_t{m.round},
                      int64_t{m.first_segment}, int64_t{m.num_segments}, m.bytes,
                      int64_t{m.src_contiguous}, int64_t{m.src_buffer},
                      m.src_offset, int64_t{m.dst_contiguous},
                      int64_t{m.dst_buffer}, m.dst_offset}) {
      w.I(v);
    }
  }
  w.I(p.rounds.size());
  for (const Round& r : p.rounds) {
    w.I(r.lane);
    w.I(r.stage);
    w.I(r.first_message);
    w.I(r.num_messages);
  }
  w.I(p.options.staging_budget_bytes);
  w.I(p.options.num_lanes);
  w.I(p.options.prefer_same_host);
  w.I(p.options.max_message_bytes);
  w.I(p.options.direct_min_bytes);
  w.I(p.options.max_round_bytes);
  WriteConversions(w, p);
  return w.Digest();
}

absl::StatusOr<Plan> BuildPlan(SideLayout src, SideLayout dst,
                               const PlannerOptions& options) {
  if (options.num_lanes < 1 || options.staging_budget_bytes < 1 ||
      options.max_message_bytes < 0 || options.direct_min_bytes < 0 ||
      options.max_round_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid planner options: num_lanes ", options.num_lanes,
        ", staging_budget_bytes ", options.staging_budget_bytes,
        ", max_message_bytes ", options.max_message_bytes,
        ", direct_min_bytes ", options.direct_min_bytes,
        ", max_round_bytes ", options.max_round_bytes));
  }
  Plan plan;
  plan.options = options;
  std::vector<std::string> errors;
  std::vector<std::pair<std::string, double>> phases;
  auto phase_start = std::chrono::steady_clock::now();
  auto phase = [&](const char* name) {
    const auto now = std::chrono::steady_clock::now();
    phases.emplace_back(
        name, std::chrono::duration<double>(now - phase_start).count());
    phase_start = now;
  };

  // --- 1. Validate both sides.
  auto validate_side = [&](const SideLayout& s, const char* side) {
    if (s.world_size < 0) {
      errors.push_back(absl::StrCat(side, " world size ", s.world_size, " < 0"));
    }
    for (const TensorSpec& t : s.tensors) {
      absl::Status st = ValidateTensorSpec(t);
      if (!st.ok()) errors.push_back(absl::StrCat(side, ": ", st.message()));
    }
    if (!errors.empty()) return;
    for (const BufferSpec& b : s.buffers) {
      if (b.rank < 0 || b.rank >= s.world_size || b.byte_size < 0) {
        errors.push_back(absl::StrCat(side, " buffer ", b.name, " on rank ",
                                      b.rank, " of ", b.byte_size,
                                      " bytes: rank or size out of range"));
      }
    }
    for (const Record& r : s.records) {
      absl::Status st = ValidateRecord(s, r);
      if (!st.ok()) errors.push_back(absl::StrCat(side, ": ", st.message()));
    }
    if (!s.host_of_rank.empty() &&
        static_cast<int32_t>(s.host_of_rank.size()) != s.world_size) {
      errors.push_back(absl::StrCat(side, " host_of_rank has ",
                                    s.host_of_rank.size(), " entries for ",
                                    s.world_size, " ranks"));
    }
    if (!s.stage_of_rank.empty() &&
        static_cast<int32_t>(s.stage_of_rank.size()) != s.world_size) {
      errors.push_back(absl::StrCat(side, " stage_of_rank has ",
                                    s.stage_of_rank.size(), " entries for ",
                                    s.world_size, " ranks"));
    }
    for (int32_t st : s.stage_of_rank) {
      if (st < 0) {
        errors.push_back(absl::StrCat(side, " has a negative stage ", st));
        break;
      }
    }
  };
  for (const TensorSpec& t : src.tensors) {
    if (t.transform != Transform::kNone) {
      errors.push_back(absl::StrCat("trainer tensor ", t.name, " has transform ",
                                    TransformName(t.transform),
                                    "; only the engine side may transform"));
    }
  }
  validate_side(src, "trainer");
  validate_side(dst, "engine");
  if (!errors.empty()) return JoinErrors(errors);
  {
    REFIT_ASSIGN_OR_RETURN(ConvertedSource converted,
                           ConvertSource(std::move(src), dst, options.fp8_block));
    src = std::move(converted.layout);
    plan.conversions = std::move(converted.conversions);
    plan.cut_tiles = std::move(converted.cut_tiles);
  }

  phase("validate");
  // --- 2. Match tensors by name.
  absl::flat_hash_map<std::string, int32_t> src_by_name;
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    if (!src_by_name.emplace(src.tensors[i].name, i).second) {
      errors.push_back(absl::StrCat("trainer tensor ", src.tensors[i].name,
                                    " is listed twice"));
    }
  }
  {
    absl::flat_hash_map<std::string, int32_t> seen;
    for (const TensorSpec& t : dst.tensors) {
      if (!seen.emplace(t.name, 0).second) {
        errors.push_back(absl::StrCat("engine tensor ", t.name, " is listed twice"));
      }
    }
  }
  plan.dst_to_src_tensor.assign(dst.tensors.size(), -1);
  for (size_t i = 0; i < dst.tensors.size(); ++i) {
    const TensorSpec& t = dst.tensors[i];
    auto it = src_by_name.find(t.name);
    if (it == src_by_name.end()) {
      errors.push_back(absl::StrCat("engine tensor ", TensorSpecString(t),
                                    " has no trainer tensor of that name"));
      continue;
    }
    const TensorSpec& s = src.tensors[it->second];
    if (s.shape != t.shape || s.dtype != t.dtype || s.stacked != t.stacked) {
      errors.push_back(absl::StrCat(
          "tensor ", t.name, " differs: trainer ", TensorSpecString(s),
          s.stacked ? " (stacked)" : "", " vs engine ", TensorSpecString(t),
          t.stacked ? " (stacked)" : ""));
      continue;
    }
    plan.dst_to_src_tensor[i] = it->second;
  }
  if (!errors.empty()) return JoinErrors(errors);

  phase("match");
  // --- 3. Normalize: merge indexed records (one record per rank instead
  // of one per expert when per-expert buffers share a layout).
  // plan.src/plan.dst are the layouts as given (moved, not copied) with
  // indexed records merged; src and dst are not used below.
  MergeIndexedRecords(&src.records);
  MergeIndexedRecords(&dst.records);
  plan.src = std::move(src);
  plan.dst = std::move(dst);
  const SideLayout& ns = plan.src;
  const SideLayout& nd = plan.dst;

  phase("normalize");
  // --- 4. Candidates: (dst record, source piece) intersections, computed
  // once per distinct (tensor, box) of the destination.
  std::vector<std::vector<int32_t>> src_recs(ns.tensors.size());
  for (size_t i = 0; i < ns.records.size(); ++i) {
    src_recs[ns.records[i].tensor].push_back(static_cast<int32_t>(i));
  }
  std::vector<TensorPieces> pieces(ns.tensors.size());
  std::vector<char> built(ns.tensors.size(), 0);
  struct Candidate {
    int32_t dst_record;
    int32_t src_tensor;
    int32_t piece;  // in pieces[src_tensor]
    int32_t dst_rank;
    int64_t bytes;
  };
  std::vector<Candidate> cands;
  {
    // dst records by tensor (counting sort), then by box within a tensor.
    const size_t nt = nd.tensors.size();
    std::vector<int32_t> first(nt + 1, 0);
    for (const Record& r : nd.records) ++first[r.tensor + 1];
    for (size_t t = 0; t < nt; ++t) first[t + 1] += first[t];
    std::vector<int32_t> order(nd.records.size());
    {
      std::vector<int32_t> cursor(first.begin(), first.end() - 1);
      for (size_t i = 0; i < nd.records.size(); ++i) {
        order[cursor[nd.records[i].tensor]++] = static_cast<int32_t>(i);
      }
    }
    std::vector<int32_t> hits;
    std::vector<Box> inter;
    std::vector<std::pair<uint64_t, int32_t>> box_hash;
    for (size_t t = 0; t < nt; ++t) {
      auto b = order.begin() + first[t], e = order.begin() + first[t + 1];
      // Equal boxes (replicas) together: sort by a hash of the box, then
      // index (a collision only splits a group; the groups stay exact).
      box_hash.clear();
      for (auto q = b; q != e; ++q) {
        const Box& bx = nd.records[*q].box;
        uint64_t h = static_cast<uint64_t>(bx.rank());
        for (int d = 0; d < bx.rank(); ++d) {
          h = (h ^ static_cast<uint64_t>(bx.origin(d))) * 0x9E3779B97F4A7C15ULL;
          h = (h ^ static_cast<uint64_t>(bx.shape(d))) * 0xC2B2AE3D27D4EB4FULL;
        }
        box_hash.emplace_back(h, *q);
      }
      std::sort(box_hash.begin(), box_hash.end());
      for (size_t q = 0; q < box_hash.size(); ++q) b[q] = box_hash[q].second;
      const int32_t st = plan.dst_to_src_tensor[t];
      const int64_t es = DTypeSize(nd.tensors[t].dtype);
      for (auto i = b; i != e;) {
        const Record& r0 = nd.records[*i];
        auto j = i;
        while (j != e && nd.records[*j].box == r0.box) ++j;
        if (IsEmpty(r0.box)) {
          i = j;
          continue;
        }
        if (!built[st]) {
          absl::Status s = BuildPieces(ns, src_recs[st], &pieces[st]);
          if (!s.ok()) return AnnotateStatus(s, "tensor " + ns.tensors[st].name);
          built[st] = 1;
        }
        FindPieces(pieces[st], r0.box, &hits);
        int64_t covered = 0;
        inter.clear();
        for (int32_t h : hits) {
          inter.push_back(Intersect(pieces[st].pieces[h].box, r0.box));
          covered += UncheckedNumElements(inter.back());
        }
        const int64_t total = UncheckedNumElements(r0.box);
        for (auto k = i; k != j; ++k) {
          if (covered != total) {
            errors.push_back(absl::StrCat(
                "no source for ", total - covered, " of ", total,
                " elements of ", DescribePart(nd.tensors[t], r0.box), " on ",
                DstRank(nd.records[*k].rank)));
            continue;
          }
          for (size_t h = 0; h < hits.size(); ++h) {
            cands.push_back(Candidate{*k, st, hits[h], nd.records[*k].rank,
                                      UncheckedNumElements(inter[h]) * es});
          }
        }
        i = j;
      }
    }
  }

  phase("candidates");
  // --- 5. Destination coverage: every byte of every destination buffer is
  // claimed by exactly one record, or declared padding.
  CheckCoverage(nd, &errors);
  if (!errors.empty()) return JoinErrors(errors);

  phase("coverage");
  // --- 6. Balance among replicas (greedy, deterministic; see planner.h).
  std::vector<int32_t> choice(cands.size(), -1);  // index into replicas
  std::vector<int64_t> assigned(ns.world_size, 0);
  auto piece_of = [&](const Candidate& c) -> const Piece& {
    return pieces[c.src_tensor].pieces[c.piece];
  };
  {
    // (-bytes, dst record, candidate): bytes descending, then destination
    // record order, then the source piece order (candidates of one record
    // are generated in piece order).
    std::vector<std::tuple<int64_t, int32_t, int32_t>> multi;
    for (size_t i = 0; i < cands.size(); ++i) {
      const Piece& p = piece_of(cands[i]);
      if (p.ranks.size() == 1) {
        choice[i] = 0;
        assigned[p.ranks[0]] += cands[i].bytes;
      } else {
        multi.emplace_back(-cands[i].bytes, cands[i].dst_record,
                           static_cast<int32_t>(i));
      }
    }
    std::sort(multi.begin(), multi.end());
    const bool hosts = options.prefer_same_host && !ns.host_of_rank.empty() &&
                       !nd.host_of_rank.empty();
    for (const auto& [neg_bytes, unused, ci] : multi) {
      const int32_t dst_rank = cands[ci].dst_rank;
      const std::vector<int32_t>& ranks = piece_of(cands[ci]).ranks;
      int32_t best = 0;
      for (int32_t k = 1; k < static_cast<int32_t>(ranks.size()); ++k) {
        const int32_t r = ranks[k], b = ranks[best];
        if (assigned[r] != assigned[b]) {
          if (assigned[r] < assigned[b]) best = k;
          continue;
        }
        if (hosts) {
          const bool rs = ns.host_of_rank[r] == nd.host_of_rank[dst_rank];
          const bool bs = ns.host_of_rank[b] == nd.host_of_rank[dst_rank];
          if (rs != bs) {
            if (rs) best = k;
            continue;
          }
        }
        // replicas are sorted by (rank, index): keep the earlier one.
      }
      choice[ci] = best;
      assigned[ranks[best]] -= neg_bytes;
    }
  }

  phase("balance");
  // --- 7. Segments (split at the message cap), sorted per (stage, src
  // rank, dst rank) by destination buffer and offset, then coalesced.
  const int64_t lane_budget =
      std::max<int64_t>(1, options.staging_budget_bytes / options.num_lanes);
  const int64_t cap = options.max_message_bytes > 0
                          ? std::min(options.max_message_bytes, lane_budget)
                          : lane_budget;
  // A segment is candidate `cand` (its intersection box), or, when the
  // candidate was split at the cap, split_boxes[split].
  struct SegKey {
    int64_t dst_start;  // byte offset of the box origin in dst_buffer
    int64_t bytes;
    int32_t dst_buffer;
    int32_t cand;
    int32_t split;      // -1: the whole candidate
    int32_t src_rank;
  };
  std::vector<SegKey> keys;
  std::vector<Box> split_boxes;
  auto seg_box = [&](const SegKey& k) {
    if (k.split >= 0) return split_boxes[k.split];
    const Candidate& c = cands[k.cand];
    return Intersect(pieces[c.src_tensor].pieces[c.piece].box,
                     nd.records[c.dst_record].box);
  };
  auto src_record_of = [&](const SegKey& k) {
    const Candidate& c = cands[k.cand];
    return pieces[c.src_tensor].pieces[c.piece].replicas[choice[k.cand]];
  };
  auto dst_rank_of = [&](const SegKey& k) { return cands[k.cand].dst_rank; };
  auto stage_of = [&](int32_t src_rank) {
    return ns.stage_of_rank.empty() ? 0 : ns.stage_of_rank[src_rank];
  };
  {
    // Source ranks ordered by (stage, rank): the pair order.
    std::vector<int32_t> src_pos(ns.world_size);
    {
      std::vector<int32_t> by(ns.world_size);
      std::iota(by.begin(), by.end(), 0);
      if (!ns.stage_of_rank.empty()) {
        std::stable_sort(by.begin(), by.end(), [&](int32_t x, int32_t y) {
          return ns.stage_of_rank[x] < ns.stage_of_rank[y];
        });
      }
      for (int32_t i = 0; i < ns.world_size; ++i) src_pos[by[i]] = i;
    }
    // Pass 1: split what exceeds the cap (rare). Candidate i's split boxes
    // are split_boxes[split_off[i], split_off[i + 1]); none: it is whole.
    std::vector<int32_t> split_off(cands.size() + 1, 0);
    std::vector<Box> split;
    for (size_t i = 0; i < cands.size(); ++i) {
      split_off[i] = static_cast<int32_t>(split_boxes.size());
      const Candidate& c = cands[i];
      const int64_t es = DTypeSize(nd.tensors[nd.records[c.dst_record].tensor].dtype);
      if (es > cap) {
        return absl::InvalidArgumentError(absl::StrCat(
            "staging budget per lane ", cap, " bytes is smaller than one element of ",
            nd.tensors[nd.records[c.dst_record].tensor].name));
      }
      if (c.bytes <= cap) continue;
      split.clear();
      SplitBox(Intersect(pieces[c.src_tensor].pieces[c.piece].box,
                         nd.records[c.dst_record].box),
               es, cap, &split);
      for (Box& b : split) split_boxes.push_back(std::move(b));
    }
    split_off[cands.size()] = static_cast<int32_t>(split_boxes.size());
    // Keys of candidate i: 1 when whole, else its split boxes.
    auto nkeys = [&](size_t i) {
      return std::max<int32_t>(1, split_off[i + 1] - split_off[i]);
    };
    const int64_t npairs = int64_t{ns.world_size} * nd.world_size;
    auto pair_of = [&](int32_t src_rank, int32_t dst_rank) {
      return int64_t{src_pos[src_rank]} * nd.world_size + dst_rank;
    };
    auto by_dst = [](const SegKey& x, const SegKey& y) {
      if (x.dst_buffer != y.dst_buffer) return x.dst_buffer < y.dst_buffer;
      if (x.dst_start != y.dst_start) return x.dst_start < y.dst_start;
      if (x.cand != y.cand) return x.cand < y.cand;
      return x.split < y.split;
    };
    // Pass 2: each key straight into its pair's slot (a counting sort over
    // pair positions; a comparison sort when there are too many pairs),
    // then each pair's keys by (dst buffer, dst offset, generation).
    const bool counting = npairs <= (int64_t{1} << 24);
    std::vector<int32_t> first;
    size_t total = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      total += nkeys(i);
    }
    keys.resize(total);
    std::vector<int32_t> cursor;
    if (counting) {
      first.assign(npairs + 1, 0);
      for (size_t i = 0; i < cands.size(); ++i) {
        const Candidate& c = cands[i];
        first[pair_of(pieces[c.src_tensor].pieces[c.piece].ranks[choice[i]],
                      c.dst_rank) + 1] += nkeys(i);
      }
      for (int64_t q = 0; q < npairs; ++q) first[q + 1] += first[q];
      cursor.assign(first.begin(), first.end() - 1);
    }
    size_t next = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      const Candidate& c = cands[i];
      const Record& dr = nd.records[c.dst_record];
      const int32_t src_rank = pieces[c.src_tensor].pieces[c.piece].ranks[choice[i]];
      const int64_t es = DTypeSize(nd.tensors[dr.tensor].dtype);
      auto add = [&](const Box& b, int32_t split_index, int64_t bytes) {
        const int64_t rel0 = b.rank() > 0 ? b.origin(0) - dr.box.origin(0) : 0;
        SegKey k{dr.byte_offset + es * ElementOffset(dr, b.origin()), bytes,
                 RecordBuffer(dr, rel0), static_cast<int32_t>(i), split_index,
                 src_rank};
        keys[counting ? cursor[pair_of(src_rank, c.dst_rank)]++ : next++] = k;
      };
      if (split_off[i + 1] == split_off[i]) {
        add(Intersect(pieces[c.src_tensor].pieces[c.piece].box, dr.box), -1,
            c.bytes);
        continue;
      }
      for (int32_t q = split_off[i]; q < split_off[i + 1]; ++q) {
        add(split_boxes[q], q, UncheckedNumElements(split_boxes[q]) * es);
      }
    }
    if (counting) {
      for (int64_t q = 0; q < npairs; ++q) {
        if (first[q + 1] - first[q] > 1) {
          std::sort(keys.begin() + first[q], keys.begin() + first[q + 1], by_dst);
        }
      }
    } else {
      std::sort(keys.begin(), keys.end(), [&](const SegKey& x, const SegKey& y) {
        const int64_t px = pair_of(x.src_rank, dst_rank_of(x));
        const int64_t py = pair_of(y.src_rank, dst_rank_of(y));
        if (px != py) return px < py;
        return by_dst(x, y);
      });
    }
  }
  phase("segments");
  // --- 8. Messages, per pair. plan.segments is written here, in pair order
  // and within a pair in message order (each message's segments
  // contiguous), each segment's box computed once.
  struct Msg {
    Message m;
    int32_t stage = 0;
    int32_t seq = 0;  // index among its pair's messages
  };
  std::vector<Msg> msgs;
  plan.segments.reserve(keys.size());
  {
    // When a segment is one contiguous range of its buffer on a side: that
    // buffer and range.
    struct Range {
      int32_t buffer = -1;  // -1: not contiguous
      ByteRange range;
    };
    auto range_of = [&](bool is_src, const Segment& sg) {
      const SideLayout& side = is_src ? ns : nd;
      const Record& r = side.records[is_src ? sg.src_record : sg.dst_record];
      Range out;
      int32_t b;
      ByteRange br;
      if (SegmentRange(r, DTypeSize(side.tensors[r.tensor].dtype), sg.box, &b,
                       &br)) {
        out.buffer = b;
        out.range = br;
      }
      return out;
    };
    // If every segment of plan.segments[j, k) is one contiguous range of one
    // buffer, continuing the previous one: that buffer and the whole range.
    auto contiguous = [&](bool is_src, size_t j, size_t k) {
      Range all;
      for (size_t q = j; q < k; ++q) {
        const Range r = range_of(is_src, plan.segments[q]);
        if (r.buffer < 0) return Range{};
        if (q == j) {
          all = r;
        } else if (r.buffer != all.buffer || r.range.begin != all.range.end()) {
          return Range{};
        } else {
          all.range.size += r.range.size;
        }
      }
      return all;
    };
    auto segment_of = [&](const SegKey& k) {
      return Segment{src_record_of(k), cands[k.cand].dst_record, seg_box(k),
                     k.bytes};
    };
    // Appends the message of plan.segments[j, end) of the pair (s, d), whose
    // contiguity per side is `src` and `dst`.
    auto add_message = [&](int32_t s, int32_t d, int32_t seq, size_t j,
                           const Range& src, const Range& dst) {
      Msg mm;
      mm.stage = stage_of(s);
      mm.seq = seq;
      mm.m.src_rank = s;
      mm.m.dst_rank = d;
      mm.m.first_segment = static_cast<int32_t>(j);
      mm.m.num_segments = static_cast<int32_t>(plan.segments.size() - j);
      int64_t bytes = 0;
      for (size_t q = j; q < plan.segments.size(); ++q) {
        bytes += plan.segments[q].bytes;
      }
      mm.m.bytes = bytes;
      if (src.buffer >= 0) {
        mm.m.src_contiguous = true;
        mm.m.src_buffer = src.buffer;
        mm.m.src_offset = src.range.begin;
      }
      if (dst.buffer >= 0) {
        mm.m.dst_contiguous = true;
        mm.m.dst_buffer = dst.buffer;
        mm.m.dst_offset = dst.range.begin;
      }
      msgs.push_back(mm);
    };
    const int64_t direct_min = options.direct_min_bytes;
    std::vector<Segment> pending;  // of the message being coalesced
    for (size_t i = 0; i < keys.size();) {
      const int32_t s = keys[i].src_rank, d = dst_rank_of(keys[i]);
      size_t e = i;
      while (e < keys.size() && keys[e].src_rank == s && dst_rank_of(keys[e]) == d) {
        ++e;
      }
      // keys[i, e) is one pair, in destination order. Segments of at least
      // direct_min bytes that are contiguous on a side become messages of
      // their own, in place; the others are coalesced in order into
      // messages of at most `cap`, each placed where it fills up.
      pending.clear();
      int64_t pending_bytes = 0;
      int32_t seq = 0;
      auto flush = [&]() {
        if (pending.empty()) return;
        const size_t j = plan.segments.size();
        for (Segment& sg : pending) plan.segments.push_back(std::move(sg));
        add_message(s, d, seq++, j, contiguous(true, j, plan.segments.size()),
                    contiguous(false, j, plan.segments.size()));
        pending.clear();
        pending_bytes = 0;
      };
      for (size_t q = i; q < e; ++q) {
        const SegKey& k = keys[q];
        Segment sg = segment_of(k);
        if (direct_min > 0 && k.bytes >= direct_min) {
          const Range src = range_of(true, sg), dst = range_of(false, sg);
          if (src.buffer >= 0 || dst.buffer >= 0) {
            plan.segments.push_back(std::move(sg));
            add_message(s, d, seq++, plan.segments.size() - 1, src, dst);
            continue;
          }
        }
        if (!pending.empty() && pending_bytes + k.bytes > cap) flush();
        pending.push_back(std::move(sg));
        pending_bytes += k.bytes;
      }
      flush();
      i = e;
    }
  }
  // The keys are not needed below.
  std::vector<SegKey>().swap(keys);
  std::vector<Box>().swap(split_boxes);

  phase("messages");
  // --- 9. Rounds per stage under the per-lane staging budget (next fit).
  std::vector<int32_t> stages;
  for (const Msg& m : msgs) stages.push_back(m.stage);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  std::vector<int32_t> order(msgs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Msg& x = msgs[a];
    const Msg& y = msgs[b];
    return std::make_tuple(x.stage, x.seq, x.m.src_rank, x.m.dst_rank) <
           std::make_tuple(y.stage, y.seq, y.m.src_rank, y.m.dst_rank);
  });
  // local round index per message, per stage.
  const int64_t round_cap =
      options.max_round_bytes > 0 ? options.max_round_bytes : lane_budget;
  std::vector<int32_t> local_round(msgs.size(), 0);
  std::vector<int32_t> rounds_in_stage(stages.size(), 0);
  {
    // Per rank and round: staged bytes (<= lane_budget) and all bytes
    // (<= round_cap; a bigger message gets an empty round).
    struct Use {
      int64_t staged = 0;
      int64_t all = 0;
    };
    size_t i = 0;
    for (size_t si = 0; si < stages.size(); ++si) {
      std::vector<std::vector<Use>> suse(ns.world_size), duse(nd.world_size);
      std::vector<int32_t> sstart(ns.world_size, 0), dstart(nd.world_size, 0);
      absl::flat_hash_map<int64_t, int32_t> pair_last;
      int32_t nrounds = 0;
      auto use = [](std::vector<Use>& v, int32_t r) -> Use& {
        if (static_cast<int32_t>(v.size()) <= r) v.resize(r + 1);
        return v[r];
      };
      auto fits = [&](const Use& u, int64_t staged, int64_t all) {
        if (u.all == 0 && all > round_cap) return true;  // a round of its own
        return u.staged + staged <= lane_budget && u.all + all <= round_cap;
      };
      auto full = [&](const Use& u) {
        return u.staged >= lane_budget || u.all >= round_cap;
      };
      for (; i < order.size() && msgs[order[i]].stage == stages[si]; ++i) {
        const Msg& mm = msgs[order[i]];
        const int32_t s = mm.m.src_rank, d = mm.m.dst_rank;
        const int64_t sc = mm.m.src_contiguous ? 0 : mm.m.bytes;
        const int64_t dc = mm.m.dst_contiguous ? 0 : mm.m.bytes;
        const int64_t key = int64_t{s} * nd.world_size + d;
        auto pl = pair_last.find(key);
        // A pair's messages keep their order: never before its last round.
        int32_t r = std::max(sstart[s], dstart[d]);
        if (pl != pair_last.end()) r = std::max(r, pl->second);
        while (true) {
          const bool sfull = !fits(use(suse[s], r), sc, mm.m.bytes);
          const bool dfull = !fits(use(duse[d], r), dc, mm.m.bytes);
          if (!sfull && !dfull) break;
          // Next fit: a rank does not return to a round that one of its
          // messages did not fit in (keeps this loop linear).
          if (sfull) sstart[s] = std::max(sstart[s], r + 1);
          if (dfull) dstart[d] = std::max(dstart[d], r + 1);
          ++r;
        }
        Use& su = use(suse[s], r);
        su.staged += sc;
        su.all += mm.m.bytes;
        Use& du = use(duse[d], r);
        du.staged += dc;
        du.all += mm.m.bytes;
        while (sstart[s] < static_cast<int32_t>(suse[s].size()) &&
               full(suse[s][sstart[s]])) {
          ++sstart[s];
        }
        while (dstart[d] < static_cast<int32_t>(duse[d].size()) &&
               full(duse[d][dstart[d]])) {
          ++dstart[d];
        }
        pair_last[key] = r;
        local_round[order[i]] = r;
        nrounds = std::max(nrounds, r + 1);
      }
      rounds_in_stage[si] = nrounds;
    }
  }
  // Global order: interleave stages (round k of each stage, stage order).
  std::vector<std::vector<int32_t>> global_of(stages.size());
  int32_t nglobal = 0;
  {
    int32_t maxr = 0;
    for (int32_t n : rounds_in_stage) maxr = std::max(maxr, n);
    for (size_t si = 0; si < stages.size(); ++si) {
      global_of[si].assign(rounds_in_stage[si], -1);
    }
    for (int32_t k = 0; k < maxr; ++k) {
      for (size_t si = 0; si < stages.size(); ++si) {
        if (k < rounds_in_stage[si]) {
          global_of[si][k] = nglobal++;
          Round r;
          r.stage = stages[si];
          r.lane = stages.size() >= 2 ? stages[si] % options.num_lanes
                                      : k % options.num_lanes;
          plan.rounds.push_back(r);
        }
      }
    }
  }
  {
    absl::flat_hash_map<int32_t, size_t> stage_index;
    for (size_t si = 0; si < stages.size(); ++si) stage_index[stages[si]] = si;
    for (size_t i = 0; i < msgs.size(); ++i) {
      msgs[i].m.round = global_of[stage_index[msgs[i].stage]][local_round[i]];
    }
  }
  phase("rounds");
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Message& x = msgs[a].m;
    const Message& y = msgs[b].m;
    return std::make_tuple(x.round, x.src_rank, x.dst_rank, msgs[a].seq) <
           std::make_tuple(y.round, y.src_rank, y.dst_rank, msgs[b].seq);
  });
  plan.messages.reserve(msgs.size());
  for (int32_t oi : order) {
    const Message& m = msgs[oi].m;
    Round& r = plan.rounds[m.round];
    if (r.num_messages == 0) {
      r.first_message = static_cast<int32_t>(plan.messages.size());
    }
    ++r.num_messages;
    plan.messages.push_back(m);
  }

  phase("emit");
  // --- 10. Stats.
  plan.stats = ComputePlanStats(plan);
  phase("stats");
  plan.fingerprint = PlanFingerprint(plan);
  phase("fingerprint");
  plan.stats.phase_seconds = std::move(phases);
  return plan;
}

}  // namespace refit
