// Reference copy: element-by-element plan execution (see reference_copy.h).
#include "common/hash.h"
#include "testing/reference_copy.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/transform.h"
#include "layout/dtype.h"

namespace refit {
namespace {

// Calls f(global index vector) for every element of box, row-major.
template <typename F>
void ForEachIndex(const Box& box, F&& f) {
  if (IsEmpty(box)) return;
  const int n = box.rank();
  Box::Indices idx(box.origin().begin(), box.origin().end());
  while (true) {
    f(idx);
    int d = n - 1;
    while (d >= 0 && ++idx[d] == box.limit(d)) {
      idx[d] = box.origin(d);
      --d;
    }
    if (d < 0) return;
  }
}

int64_t ByteOf(const Record& r, int64_t es, const Box::Indices& g) {
  int64_t off = 0;
  for (int d = 0; d < r.box.rank(); ++d) {
    off += DimOffset(r.dims[d], g[d] - r.box.origin(d));
  }
  return r.byte_offset + off * es;
}

// The buffer of r holding global index g (indexed records: per dim-0 index).
int32_t BufferOf(const Record& r, const Box::Indices& g) {
  return RecordBuffer(r, g.empty() ? 0 : g[0] - r.box.origin(0));
}

}  // namespace

OwnedBuffers AllocateBuffers(const SideLayout& side, uint8_t fill) {
  OwnedBuffers o;
  o.storage.reserve(side.buffers.size());
  for (const BufferSpec& b : side.buffers) {
    o.storage.emplace_back(static_cast<size_t>(b.byte_size), fill);
  }
  for (auto& s : o.storage) o.ptrs.push_back(s.data());
  return o;
}

absl::Status ReferenceCopy(const Plan& plan, const HostBuffers& src,
                           const HostBuffers& dst) {
  if (src.size() != plan.src.buffers.size() ||
      dst.size() != plan.dst.buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference copy: ", src.size(), "/", dst.size(),
        " buffers given for a plan with ", plan.src.buffers.size(), "/",
        plan.dst.buffers.size()));
  }
  for (const Segment& s : plan.segments) {
    if (s.src_record < 0 ||
        s.src_record >= static_cast<int32_t>(plan.src.records.size()) ||
        s.dst_record < 0 ||
        s.dst_record >= static_cast<int32_t>(plan.dst.records.size())) {
      return absl::InvalidArgumentError("reference copy: record out of range");
    }
    const Record& sr = plan.src.records[s.src_record];
    const Record& dr = plan.dst.records[s.dst_record];
    if (!Contains(sr.box, s.box) || !Contains(dr.box, s.box)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reference copy: segment ", s.box.ToString(), " of tensor ",
          plan.dst.tensors[dr.tensor].name, " is outside its records"));
    }
    const int64_t es = DTypeSize(plan.dst.tensors[dr.tensor].dtype);
    ForEachIndex(s.box, [&](const Box::Indices& g) {
      const uint8_t* sb = src[BufferOf(sr, g)];
      uint8_t* db = dst[BufferOf(dr, g)];
      const int64_t so = ByteOf(sr, es, g);
      const int64_t doff = ByteOf(dr, es, g);
      for (int64_t k = 0; k < es; ++k) db[doff + k] = sb[so + k];
    });
  }
  // Destination transforms (e.g. A = -exp(A_log)), as the executor does.
  std::vector<char*> ptrs;
  for (uint8_t* p : dst) ptrs.push_back(reinterpret_cast<char*>(p));
  return ApplyTransformRunsHost(TransformRuns(plan.dst, -1), ptrs);
}

uint64_t NameHash(const std::string& name) { return Fnv1a64(name); }

uint64_t PatternWord(uint64_t name_hash, int64_t index, uint64_t seed) {
  uint64_t x = name_hash ^ (seed * 0xD6E8FEB86659FD93ULL) ^
               (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 29;
  return x;
}

uint8_t PatternByte(uint64_t name_hash, int64_t index, int64_t k,
                    uint64_t seed) {
  return static_cast<uint8_t>(PatternWord(name_hash, index, seed) >> (8 * k));
}

namespace {

// Calls row(buffer, byte offset table of the innermost dim, base byte
// offset, base linear index, global indices of the row start) for every
// innermost row of record r's box. Element j of the row is at base +
// inner[j] of that buffer and has linear index lin + j.
template <typename F>
void ForEachRow(const Record& r, const TensorSpec& t, int64_t es, F&& row) {
  if (IsEmpty(r.box)) return;
  const int n = r.box.rank();
  if (n == 0) {
    row(r.buffer, std::vector<int64_t>{0}, r.byte_offset, int64_t{0},
        Box::Indices{});
    return;
  }
  if (n == 1 && r.buffer_step > 0) {
    // An indexed record of one dim (per-expert scalars, e.g. per-tensor FP8
    // scales): every element is in its own buffer, so each is a row.
    for (int64_t j = 0; j < r.box.shape(0); ++j) {
      Box::Indices idx = {r.box.origin(0) + j};
      row(BufferOf(r, idx), std::vector<int64_t>{0},
          r.byte_offset + DimOffset(r.dims[0], j) * es, idx[0], idx);
    }
    return;
  }
  std::vector<int64_t> inner(r.box.shape(n - 1));
  for (int64_t j = 0; j < r.box.shape(n - 1); ++j) {
    inner[j] = DimOffset(r.dims[n - 1], j) * es;
  }
  Box::Indices idx(r.box.origin().begin(), r.box.origin().end());
  while (true) {
    int64_t off = r.byte_offset;
    int64_t lin = 0;
    for (int d = 0; d < n; ++d) {
      if (d < n - 1) off += DimOffset(r.dims[d], idx[d] - r.box.origin(d)) * es;
      lin = lin * t.shape[d] + idx[d];
    }
    row(BufferOf(r, idx), inner, off, lin, idx);
    int d = n - 2;
    while (d >= 0 && ++idx[d] == r.box.limit(d)) {
      idx[d] = r.box.origin(d);
      --d;
    }
    if (d < 0) return;
  }
}

bool Selected(const Record& r, const PatternOptions& o) {
  return o.rank < 0 || r.rank == o.rank;
}

}  // namespace

void FillPattern(const SideLayout& side, const HostBuffers& buffers,
                 PatternOptions options) {
  for (const Record& r : side.records) {
    if (!Selected(r, options)) continue;
    const TensorSpec& t = side.tensors[r.tensor];
    const int64_t es = DTypeSize(t.dtype);
    const uint64_t h = NameHash(t.name);
    ForEachRow(r, t, es, [&](int32_t buffer, const std::vector<int64_t>& inner,
                             int64_t off, int64_t lin, const Box::Indices&) {
      uint8_t* b = buffers[buffer];
      for (size_t j = 0; j < inner.size(); ++j) {
        const uint64_t w = PatternWord(h, lin + static_cast<int64_t>(j),
                                       options.seed);
        uint8_t* p = b + off + inner[j];
        for (int64_t k = 0; k < es; ++k) p[k] = static_cast<uint8_t>(w >> (8 * k));
      }
    });
  }
}

absl::Status CheckPattern(const SideLayout& side, const HostBuffers& buffers,
                          PatternOptions options) {
  std::vector<std::string> bad;
  int64_t nbad = 0;
  for (const Record& r : side.records) {
    if (!Selected(r, options)) continue;
    const TensorSpec& t = side.tensors[r.tensor];
    const int64_t es = DTypeSize(t.dtype);
    const uint64_t h = NameHash(t.name);
    ForEachRow(r, t, es, [&](int32_t buffer, const std::vector<int64_t>& inner,
                             int64_t off, int64_t lin,
                             const Box::Indices& row_start) {
      const uint8_t* b = buffers[buffer];
      for (size_t j = 0; j < inner.size(); ++j) {
        const uint64_t w = PatternWord(h, lin + static_cast<int64_t>(j),
                                       options.seed);
        const uint8_t* p = b + off + inner[j];
        if (t.transform != Transform::kNone && (es == 2 || es == 4)) {
          // Transformed on arrival: compare values within the tolerance.
          uint32_t got = 0;
          std::memcpy(&got, p, es);
          const uint32_t want = TransformElement(
              t.transform, t.dtype,
              static_cast<uint32_t>(w & (es == 2 ? 0xFFFFu : 0xFFFFFFFFu)));
          if (!TransformMatches(t.dtype, want, got) && ++nbad <= 10) {
            Box::Indices g = row_start;
            if (!g.empty()) g.back() += static_cast<int64_t>(j);
            bad.push_back(absl::StrCat(
                "tensor ", t.name, " element [", absl::StrJoin(g, ", "),
                "] on rank ", r.rank, " buffer ", side.buffers[buffer].name,
                ": transform ", TransformName(t.transform), " expected bits ",
                want, ", got ", got));
          }
          continue;
        }
        for (int64_t k = 0; k < es; ++k) {
          if (p[k] != static_cast<uint8_t>(w >> (8 * k))) {
            if (++nbad <= 10) {
              Box::Indices g = row_start;
              if (!g.empty()) g.back() += static_cast<int64_t>(j);
              bad.push_back(absl::StrCat(
                  "tensor ", t.name, " element [", absl::StrJoin(g, ", "),
                  "] on rank ", r.rank, " buffer ",
                  side.buffers[buffer].name, " byte ", off + inner[j] + k,
                  " is wrong"));
            }
            break;
          }
        }
      }
    });
  }
  if (nbad == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(nbad, " wrong elements: ",
                                          absl::StrJoin(bad, "; ")));
}

}  // namespace refit
