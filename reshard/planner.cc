// BuildPlan: segments from overlaps, greedy replica balance, coalescing into
// messages, rounds under the staging budget, coverage validation and the
// fingerprint. See planner.h for the contract and the balancing rule.
#include "reshard/planner.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "reshard/dtype.h"

namespace refit {
namespace {

constexpr int kMaxErrorLines = 50;
constexpr int64_t kMaxCoverageRuns = 1 << 20;
constexpr int64_t kMaxGridCells = 1 << 20;

std::string SrcRank(int32_t r) { return absl::StrCat("trainer rank ", r); }
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
      if (!IsEmpty(Intersect(distinct[i].box, distinct[j].box))) {
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
    if (!IsEmpty(Intersect(ps[i].box, q))) hits->push_back(static_cast<int32_t>(i));
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

// Canonical serialization for the fingerprint.
class Writer {
 public:
  void I(int64_t v) { s_.append(reinterpret_cast<const char*>(&v), 8); }
  void S(const std::string& v) {
    I(static_cast<int64_t>(v.size()));
    s_.append(v);
  }
  void B(const Box& b) {
    I(b.rank());
    for (int d = 0; d < b.rank(); ++d) {
      I(b.origin(d));
      I(b.shape(d));
    }
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
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
  }
  w.I(s.host_of_rank.size());
  for (int32_t h : s.host_of_rank) w.I(h);
  w.I(s.stage_of_rank.size());
  for (int32_t h : s.stage_of_rank) w.I(h);
}

}  // namespace

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
  // Two independent 64-bit hashes: FNV-1a and a multiply-xorshift mix.
  const std::string& s = w.str();
  uint64_t h1 = 1469598103934665603ULL;
  uint64_t h2 = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    for (int k = 0; k < 8; ++k) {
      h1 ^= (v >> (8 * k)) & 0xff;
      h1 *= 1099511628211ULL;
    }
    h2 ^= v * 0xC2B2AE3D27D4EB4FULL;
    h2 = ((h2 << 31) | (h2 >> 33)) * 0x9E3779B185EBCA87ULL;
  }
  for (; i < s.size(); ++i) {
    h1 ^= static_cast<unsigned char>(s[i]);
    h1 *= 1099511628211ULL;
    h2 ^= static_cast<unsigned char>(s[i]) * 0x165667B19E3779F9ULL;
    h2 = ((h2 << 23) | (h2 >> 41)) * 0x9E3779B185EBCA87ULL;
  }
  h2 ^= h2 >> 33;
  h2 *= 0xFF51AFD7ED558CCDULL;
  h2 ^= h2 >> 33;
  char buf[33];
  snprintf(buf, sizeof(buf), "%016llx%016llx",
           static_cast<unsigned long long>(h1),
           static_cast<unsigned long long>(h2));
  return buf;
}

absl::StatusOr<Plan> BuildPlan(const SideLayout& src, const SideLayout& dst,
                               const PlannerOptions& options) {
  if (options.num_lanes < 1 || options.staging_budget_bytes < 1 ||
      options.max_message_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid planner options: num_lanes ", options.num_lanes,
        ", staging_budget_bytes ", options.staging_budget_bytes,
        ", max_message_bytes ", options.max_message_bytes));
  }
  Plan plan;
  plan.src = src;
  plan.dst = dst;
  plan.options = options;
  std::vector<std::string> errors;

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

  // --- 3. Source pieces per tensor (built lazily for tensors the dst uses).
  std::vector<std::vector<int32_t>> src_recs(src.tensors.size());
  for (size_t i = 0; i < src.records.size(); ++i) {
    src_recs[src.records[i].tensor].push_back(static_cast<int32_t>(i));
  }
  std::vector<TensorPieces> pieces(src.tensors.size());
  std::vector<char> built(src.tensors.size(), 0);

  // --- 4. Candidates: (dst record, piece) intersections, per distinct box.
  struct Candidate {
    int32_t dst_record;
    int32_t src_tensor;
    int32_t piece;
    Box box;
    int64_t bytes;
  };
  std::vector<Candidate> cands;
  {
    // dst records grouped by (tensor, box).
    std::vector<int32_t> order(dst.records.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const Record& ra = dst.records[a];
      const Record& rb = dst.records[b];
      if (ra.tensor != rb.tensor) return ra.tensor < rb.tensor;
      if (ra.box != rb.box) return ra.box < rb.box;
      return a < b;
    });
    std::vector<int32_t> hits;
    std::vector<Box> inter;
    for (size_t i = 0; i < order.size();) {
      const Record& r0 = dst.records[order[i]];
      size_t j = i;
      while (j < order.size() && dst.records[order[j]].tensor == r0.tensor &&
             dst.records[order[j]].box == r0.box) {
        ++j;
      }
      if (IsEmpty(r0.box)) {
        i = j;
        continue;
      }
      const int32_t st = plan.dst_to_src_tensor[r0.tensor];
      if (!built[st]) {
        absl::Status s = BuildPieces(src, src_recs[st], &pieces[st]);
        if (!s.ok()) {
          return AnnotateStatus(s, "tensor " + src.tensors[st].name);
        }
        built[st] = 1;
      }
      FindPieces(pieces[st], r0.box, &hits);
      inter.clear();
      int64_t covered = 0;
      for (int32_t h : hits) {
        inter.push_back(Intersect(pieces[st].pieces[h].box, r0.box));
        covered += UncheckedNumElements(inter.back());
      }
      const int64_t total = UncheckedNumElements(r0.box);
      const int64_t es = DTypeSize(dst.tensors[r0.tensor].dtype);
      for (size_t k = i; k < j; ++k) {
        const int32_t ri = order[k];
        if (covered != total) {
          errors.push_back(absl::StrCat(
              "no source for ", total - covered, " of ", total,
              " elements of ", DescribePart(dst.tensors[r0.tensor], r0.box),
              " on ", DstRank(dst.records[ri].rank)));
          continue;
        }
        for (size_t h = 0; h < hits.size(); ++h) {
          cands.push_back(Candidate{ri, st, hits[h], inter[h],
                                    UncheckedNumElements(inter[h]) * es});
        }
      }
      i = j;
    }
  }

  // --- 5. Destination coverage: overlaps and unsourced bytes per buffer.
  {
    std::vector<std::vector<std::pair<ByteRange, int32_t>>> runs(
        dst.buffers.size());
    std::vector<char> unchecked(dst.buffers.size(), 0);
    for (size_t i = 0; i < dst.records.size(); ++i) {
      const Record& r = dst.records[i];
      if (unchecked[r.buffer] || IsEmpty(r.box)) continue;
      std::vector<ByteRange> rr =
          ByteRuns(r, DTypeSize(dst.tensors[r.tensor].dtype), r.box,
                   kMaxCoverageRuns);
      if (static_cast<int64_t>(rr.size()) > kMaxCoverageRuns) {
        unchecked[r.buffer] = 1;  // too fragmented to check byte by byte
        runs[r.buffer].clear();
        continue;
      }
      for (const ByteRange& b : rr) {
        runs[r.buffer].emplace_back(b, static_cast<int32_t>(i));
      }
    }
    auto describe = [&](int32_t ri) {
      const Record& r = dst.records[ri];
      return DescribePart(dst.tensors[r.tensor], r.box);
    };
    for (size_t b = 0; b < dst.buffers.size(); ++b) {
      if (unchecked[b]) continue;
      const BufferSpec& buf = dst.buffers[b];
      auto& rs = runs[b];
      std::sort(rs.begin(), rs.end(), [](const auto& x, const auto& y) {
        return std::make_tuple(x.first.begin, x.first.size, x.second) <
               std::make_tuple(y.first.begin, y.first.size, y.second);
      });
      std::vector<ByteRange> pad(buf.padding);
      std::sort(pad.begin(), pad.end());
      auto report_gap = [&](int64_t a, int64_t e) {
        // Subtract padding from [a, e).
        for (const ByteRange& p : pad) {
          if (a >= e) break;
          if (p.end() <= a || p.begin >= e) continue;
          if (p.begin > a) {
            errors.push_back(absl::StrCat("unsourced bytes [", a, ", ", p.begin,
                                          ") of buffer ", buf.name, " on ",
                                          DstRank(buf.rank)));
          }
          a = std::max(a, p.end());
        }
        if (a < e) {
          errors.push_back(absl::StrCat("unsourced bytes [", a, ", ", e,
                                        ") of buffer ", buf.name, " on ",
                                        DstRank(buf.rank)));
        }
      };
      int64_t cursor = 0;
      int32_t cursor_rec = -1;
      absl::flat_hash_map<std::pair<int32_t, int32_t>, int> reported;
      for (const auto& [br, ri] : rs) {
        if (br.begin < cursor) {
          if (reported.emplace(std::make_pair(cursor_rec, ri), 0).second) {
            errors.push_back(absl::StrCat(
                cursor_rec == ri ? "record " : "records ",
                describe(cursor_rec),
                cursor_rec == ri ? "" : absl::StrCat(" and ", describe(ri)),
                cursor_rec == ri ? " overlaps itself" : " overlap",
                " at byte ", br.begin, " of buffer ", buf.name, " on ",
                DstRank(buf.rank)));
          }
        } else if (br.begin > cursor) {
          report_gap(cursor, br.begin);
        }
        if (br.end() > cursor) {
          cursor = br.end();
          cursor_rec = ri;
        }
      }
      if (cursor < buf.byte_size) report_gap(cursor, buf.byte_size);
    }
  }
  if (!errors.empty()) return JoinErrors(errors);

  // --- 6. Balance among replicas (greedy, deterministic; see planner.h).
  // Sort indices, not the (large) candidates; the order is total (ends on
  // dst_record), so it is the same whichever sort produces it.
  std::vector<int32_t> cand_order(cands.size());
  std::iota(cand_order.begin(), cand_order.end(), 0);
  {
    std::vector<int32_t> cand_tensor(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) {
      cand_tensor[i] = dst.records[cands[i].dst_record].tensor;
    }
    std::sort(cand_order.begin(), cand_order.end(), [&](int32_t x, int32_t y) {
      const Candidate& a = cands[x];
      const Candidate& b = cands[y];
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      if (cand_tensor[x] != cand_tensor[y]) return cand_tensor[x] < cand_tensor[y];
      if (a.box != b.box) return a.box < b.box;
      const int32_t ra = dst.records[a.dst_record].rank;
      const int32_t rb = dst.records[b.dst_record].rank;
      if (ra != rb) return ra < rb;
      return a.dst_record < b.dst_record;
    });
  }
  const bool hosts = options.prefer_same_host && !src.host_of_rank.empty() &&
                     !dst.host_of_rank.empty();
  std::vector<int64_t> assigned(src.world_size, 0);
  struct Seg {
    int32_t stage, src_rank, dst_rank;
    int32_t src_record, dst_record;
    int32_t dst_buffer;
    int64_t dst_start;  // byte offset in dst buffer of the box origin
    Box box;
    int64_t bytes;
  };
  std::vector<Seg> segs;
  segs.reserve(cands.size());
  const int64_t lane_budget =
      std::max<int64_t>(1, options.staging_budget_bytes / options.num_lanes);
  const int64_t cap = options.max_message_bytes > 0
                          ? std::min(options.max_message_bytes, lane_budget)
                          : lane_budget;
  std::vector<Box> split;
  for (int32_t ci : cand_order) {
    const Candidate& c = cands[ci];
    const Record& dr = dst.records[c.dst_record];
    const auto& reps = pieces[c.src_tensor].pieces[c.piece].replicas;
    int32_t best = -1;
    for (int32_t ri : reps) {
      if (best < 0) {
        best = ri;
        continue;
      }
      const int32_t r = src.records[ri].rank, b = src.records[best].rank;
      if (assigned[r] != assigned[b]) {
        if (assigned[r] < assigned[b]) best = ri;
        continue;
      }
      if (hosts) {
        const bool rs = src.host_of_rank[r] == dst.host_of_rank[dr.rank];
        const bool bs = src.host_of_rank[b] == dst.host_of_rank[dr.rank];
        if (rs != bs) {
          if (rs) best = ri;
          continue;
        }
      }
      // replicas are sorted by (rank, index): keep the earlier one.
    }
    const Record& sr = src.records[best];
    assigned[sr.rank] += c.bytes;
    const int64_t es = DTypeSize(dst.tensors[dr.tensor].dtype);
    if (es > cap) {
      return absl::InvalidArgumentError(absl::StrCat(
          "staging budget per lane ", cap, " bytes is smaller than one element of ",
          dst.tensors[dr.tensor].name));
    }
    split.clear();
    SplitBox(c.box, es, cap, &split);
    const int32_t stage =
        src.stage_of_rank.empty() ? 0 : src.stage_of_rank[sr.rank];
    for (const Box& b : split) {
      segs.push_back(Seg{stage, sr.rank, dr.rank, best, c.dst_record, dr.buffer,
                         dr.byte_offset + es * ElementOffset(dr, b.origin()), b,
                         UncheckedNumElements(b) * es});
    }
  }

  // --- 7. Coalesce per (stage, src rank, dst rank) into messages.
  {
  // Sort indices, then permute once (Seg holds a Box: swaps are costly).
  std::vector<int32_t> seg_order(segs.size());
  std::iota(seg_order.begin(), seg_order.end(), 0);
  std::sort(seg_order.begin(), seg_order.end(), [&](int32_t x, int32_t y) {
    const Seg& a = segs[x];
    const Seg& b = segs[y];
    if (a.stage != b.stage) return a.stage < b.stage;
    if (a.src_rank != b.src_rank) return a.src_rank < b.src_rank;
    if (a.dst_rank != b.dst_rank) return a.dst_rank < b.dst_rank;
    if (a.dst_buffer != b.dst_buffer) return a.dst_buffer < b.dst_buffer;
    if (a.dst_start != b.dst_start) return a.dst_start < b.dst_start;
    const int32_t ta = dst.records[a.dst_record].tensor;
    const int32_t tb = dst.records[b.dst_record].tensor;
    if (ta != tb) return ta < tb;
    if (a.box != b.box) return a.box < b.box;
    return a.dst_record < b.dst_record;
  });
  std::vector<Seg> sorted_segs;
  sorted_segs.reserve(segs.size());
  for (int32_t i : seg_order) sorted_segs.push_back(std::move(segs[i]));
  segs.swap(sorted_segs);
  }
  struct Msg {
    Message m;
    int32_t stage;
    int32_t seq;  // index among its pair's messages
    int32_t first_seg;  // into segs
  };
  std::vector<Msg> msgs;
  for (size_t i = 0; i < segs.size();) {
    size_t j = i;
    int32_t seq = 0;
    while (j < segs.size() && segs[j].stage == segs[i].stage &&
           segs[j].src_rank == segs[i].src_rank &&
           segs[j].dst_rank == segs[i].dst_rank) {
      Msg mm;
      mm.stage = segs[j].stage;
      mm.seq = seq++;
      mm.first_seg = static_cast<int32_t>(j);
      mm.m.src_rank = segs[j].src_rank;
      mm.m.dst_rank = segs[j].dst_rank;
      int64_t bytes = 0;
      size_t k = j;
      while (k < segs.size() && segs[k].stage == segs[i].stage &&
             segs[k].src_rank == segs[i].src_rank &&
             segs[k].dst_rank == segs[i].dst_rank &&
             (k == j || bytes + segs[k].bytes <= cap)) {
        bytes += segs[k].bytes;
        ++k;
      }
      mm.m.num_segments = static_cast<int32_t>(k - j);
      mm.m.bytes = bytes;
      // Contiguity on each side.
      auto contiguous = [&](const SideLayout& side, bool is_src, int32_t* buffer,
                            int64_t* offset) {
        int64_t end = -1;
        for (size_t q = j; q < k; ++q) {
          const Record& r =
              side.records[is_src ? segs[q].src_record : segs[q].dst_record];
          std::optional<ByteRange> br = ContiguousByteRange(
              r, DTypeSize(side.tensors[r.tensor].dtype), segs[q].box);
          if (!br) return false;
          if (q == j) {
            *buffer = r.buffer;
            *offset = br->begin;
          } else if (r.buffer != *buffer || br->begin != end) {
            return false;
          }
          end = br->end();
        }
        return true;
      };
      int32_t b;
      int64_t o;
      if (contiguous(src, true, &b, &o)) {
        mm.m.src_contiguous = true;
        mm.m.src_buffer = b;
        mm.m.src_offset = o;
      }
      if (contiguous(dst, false, &b, &o)) {
        mm.m.dst_contiguous = true;
        mm.m.dst_buffer = b;
        mm.m.dst_offset = o;
      }
      msgs.push_back(mm);
      j = k;
    }
    i = j;
  }

  // --- 8. Rounds per stage under the per-lane staging budget (first fit).
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
  std::vector<int32_t> local_round(msgs.size(), 0);
  std::vector<int32_t> rounds_in_stage(stages.size(), 0);
  {
    size_t i = 0;
    for (size_t si = 0; si < stages.size(); ++si) {
      std::vector<std::vector<int64_t>> suse(src.world_size), duse(dst.world_size);
      std::vector<int32_t> sstart(src.world_size, 0), dstart(dst.world_size, 0);
      absl::flat_hash_map<int64_t, int32_t> pair_last;
      int32_t nrounds = 0;
      for (; i < order.size() && msgs[order[i]].stage == stages[si]; ++i) {
        const Msg& mm = msgs[order[i]];
        const int32_t s = mm.m.src_rank, d = mm.m.dst_rank;
        const int64_t sc = mm.m.src_contiguous ? 0 : mm.m.bytes;
        const int64_t dc = mm.m.dst_contiguous ? 0 : mm.m.bytes;
        const int64_t key = int64_t{s} * dst.world_size + d;
        auto pl = pair_last.find(key);
        int32_t r = std::max(sstart[s], dstart[d]);
        if (pl != pair_last.end()) r = std::max(r, pl->second + 1);
        auto use = [](std::vector<int64_t>& v, int32_t r) -> int64_t& {
          if (static_cast<int32_t>(v.size()) <= r) v.resize(r + 1, 0);
          return v[r];
        };
        while (use(suse[s], r) + sc > lane_budget ||
               use(duse[d], r) + dc > lane_budget) {
          ++r;
        }
        use(suse[s], r) += sc;
        use(duse[d], r) += dc;
        while (sstart[s] < static_cast<int32_t>(suse[s].size()) &&
               suse[s][sstart[s]] >= lane_budget) {
          ++sstart[s];
        }
        while (dstart[d] < static_cast<int32_t>(duse[d].size()) &&
               duse[d][dstart[d]] >= lane_budget) {
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
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Message& x = msgs[a].m;
    const Message& y = msgs[b].m;
    return std::make_tuple(x.round, x.src_rank, x.dst_rank) <
           std::make_tuple(y.round, y.src_rank, y.dst_rank);
  });
  plan.messages.reserve(msgs.size());
  plan.segments.reserve(segs.size());
  for (int32_t oi : order) {
    Msg& mm = msgs[oi];
    Message m = mm.m;
    m.first_segment = static_cast<int32_t>(plan.segments.size());
    for (int32_t q = 0; q < m.num_segments; ++q) {
      const Seg& s = segs[mm.first_seg + q];
      plan.segments.push_back(Segment{s.src_record, s.dst_record, s.box, s.bytes});
    }
    Round& r = plan.rounds[m.round];
    if (r.num_messages == 0) {
      r.first_message = static_cast<int32_t>(plan.messages.size());
    }
    ++r.num_messages;
    plan.messages.push_back(m);
  }

  // --- 9. Stats.
  PlanStats& st = plan.stats;
  st.num_segments = static_cast<int64_t>(plan.segments.size());
  st.num_messages = static_cast<int64_t>(plan.messages.size());
  st.num_rounds = static_cast<int64_t>(plan.rounds.size());
  st.bytes_sent.assign(src.world_size, 0);
  st.bytes_received.assign(dst.world_size, 0);
  st.staging_src.assign(src.world_size, 0);
  st.staging_dst.assign(dst.world_size, 0);
  {
    // peak per (rank, lane) over rounds, then summed over lanes.
    const int L = options.num_lanes;
    std::vector<int64_t> ps(int64_t{src.world_size} * L, 0),
        pd(int64_t{dst.world_size} * L, 0);
    absl::flat_hash_map<int32_t, int64_t> rs, rd;
    for (const Round& r : plan.rounds) {
      rs.clear();
      rd.clear();
      for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
        const Message& m = plan.messages[i];
        st.total_bytes += m.bytes;
        st.bytes_sent[m.src_rank] += m.bytes;
        st.bytes_received[m.dst_rank] += m.bytes;
        if (!m.src_contiguous) rs[m.src_rank] += m.bytes;
        if (!m.dst_contiguous) rd[m.dst_rank] += m.bytes;
      }
      for (const auto& [k, v] : rs) {
        ps[int64_t{k} * L + r.lane] = std::max(ps[int64_t{k} * L + r.lane], v);
      }
      for (const auto& [k, v] : rd) {
        pd[int64_t{k} * L + r.lane] = std::max(pd[int64_t{k} * L + r.lane], v);
      }
    }
    for (int32_t k = 0; k < src.world_size; ++k) {
      for (int l = 0; l < L; ++l) st.staging_src[k] += ps[int64_t{k} * L + l];
    }
    for (int32_t k = 0; k < dst.world_size; ++k) {
      for (int l = 0; l < L; ++l) st.staging_dst[k] += pd[int64_t{k} * L + l];
    }
  }
  plan.fingerprint = PlanFingerprint(plan);
  return plan;
}

}  // namespace refit
