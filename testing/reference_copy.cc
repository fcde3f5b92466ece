// Reference copy: element-by-element plan execution (see reference_copy.h).
#include "common/hash.h"
#include "testing/reference_copy.h"

#include <algorithm>

#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "testing/reference_convert.h"
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

absl::Status ReferenceCopy(const Plan& plan, const HostBuffers& given_src,
                           const HostBuffers& dst) {
  // Scratch buffers (converted values) come last; the caller may leave
  // them out, and they are computed here.
  HostBuffers src = given_src;
  std::vector<std::vector<uint8_t>> scratch;
  for (size_t b = src.size(); b < plan.src.buffers.size(); ++b) {
    if (!plan.src.buffers[b].scratch) break;
    scratch.emplace_back(plan.src.buffers[b].byte_size);
    src.push_back(scratch.back().data());
  }
  if (!plan.conversions.empty()) {
    absl::Status s = testing::ReferenceConvert(plan, src);
    if (!s.ok()) return s;
  }
  if (src.size() != plan.src.buffers.size() ||
      dst.size() != plan.dst.buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference copy: ", src.size(), "/", dst.size(),
        " buffers given for a plan with ", plan.src.buffers.size(), "/",
        plan.dst.buffers.size()));
  }
  // Copies segment s from `from` (the trainer's records and buffers, or
  // for a relay the engine's) to the engine's.
  auto copy = [&](const Segment& s, const SideLayout& from, const HostBuffers& from_bufs) {
    if (s.src_record < 0 || s.src_record >= static_cast<int32_t>(from.records.size()) ||
        s.dst_record < 0 ||
        s.dst_record >= static_cast<int32_t>(plan.dst.records.size())) {
      return absl::InvalidArgumentError("reference copy: record out of range");
    }
    const Record& sr = from.records[s.src_record];
    const Record& dr = plan.dst.records[s.dst_record];
    if (!Contains(sr.box, s.box) || !Contains(dr.box, s.box)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reference copy: segment ", s.box.ToString(), " of tensor ",
          plan.dst.tensors[dr.tensor].name, " is outside its records"));
    }
    const int64_t es = DTypeSize(plan.dst.tensors[dr.tensor].dtype);
    ForEachIndex(s.box, [&](const Box::Indices& g) {
      const uint8_t* sb = from_bufs[BufferOf(sr, g)];
      uint8_t* db = dst[BufferOf(dr, g)];
      const int64_t so = ByteOf(sr, es, g);
      const int64_t doff = ByteOf(dr, es, g);
      for (int64_t k = 0; k < es; ++k) db[doff + k] = sb[so + k];
    });
    return absl::OkStatus();
  };
  const bool relays = std::any_of(plan.messages.begin(), plan.messages.end(),
                                  [](const Message& m) { return m.relay; });
  if (!relays) {
    for (const Segment& s : plan.segments) {
      absl::Status st = copy(s, plan.src, src);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // With relays: message by message in plan (wave) order, a relay reading
  // the engine's buffers as earlier messages left them.
  for (const Message& m : plan.messages) {
    if (m.first_segment < 0 ||
        int64_t{m.first_segment} + m.num_segments > static_cast<int64_t>(plan.segments.size())) {
      return absl::InvalidArgumentError("reference copy: segment out of range");
    }
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      absl::Status st = m.relay ? copy(plan.segments[i], plan.dst, dst)
                                : copy(plan.segments[i], plan.src, src);
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
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

uint64_t ElementSeed(const PatternOptions& options, uint64_t name_hash, int64_t index) {
  if (options.changed_every <= 0) return options.seed;
  const uint64_t h = PatternWord(name_hash, index, 0x5eed);
  return h % static_cast<uint64_t>(options.changed_every) == 0 ? options.seed
                                                                : options.base_seed;
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
        const uint64_t w = testing::FiniteWord(
            t.dtype, PatternWord(h, lin + static_cast<int64_t>(j),
                                 ElementSeed(options, h, lin + static_cast<int64_t>(j))));
        uint8_t* p = b + off + inner[j];
        for (int64_t k = 0; k < es; ++k) p[k] = static_cast<uint8_t>(w >> (8 * k));
      }
    });
  }
}

void ForEachPatternRow(
    const SideLayout& side, PatternOptions options,
    const std::function<void(const Record& record, int32_t buffer,
                             const std::vector<int64_t>& inner, int64_t off, int64_t lin)>& row) {
  for (const Record& r : side.records) {
    if (!Selected(r, options)) continue;
    const TensorSpec& t = side.tensors[r.tensor];
    ForEachRow(r, t, DTypeSize(t.dtype),
               [&](int32_t buffer, const std::vector<int64_t>& inner, int64_t off, int64_t lin,
                   const Box::Indices&) { row(r, buffer, inner, off, lin); });
  }
}

// The expected bytes of tensor t where the engine holds a conversion of
// the trainer's pattern (options.source_dtypes); empty when t holds the
// pattern itself.
const std::vector<uint8_t>* ExpectedFor(const SideLayout& side, const TensorSpec& t,
                                        const PatternOptions& options,
                                        std::map<std::string, std::vector<uint8_t>>* cache) {
  if (options.source_dtypes == nullptr) return nullptr;
  if (auto it = cache->find(t.name); it != cache->end()) {
    return it->second.empty() ? nullptr : &it->second;
  }
  std::vector<uint8_t>& out = (*cache)[t.name];
  const auto& src = *options.source_dtypes;
  if (testing::ExpectedNvfp4(side, t, src, options.seed, &out)) {
    return out.empty() ? nullptr : &out;
  }
  auto sd = src.find(t.name);
  if (sd != src.end() && (sd->second != t.dtype || t.transform == Transform::kNegExp)) {
    out = testing::ExpectedConverted(t, sd->second, nullptr, options.seed, options.fp8_block);
  }
  const std::string mx_suffix = "_scale";
  if (sd == src.end() && t.dtype == DType::kU8 && t.name.size() > mx_suffix.size() &&
      t.name.compare(t.name.size() - mx_suffix.size(), mx_suffix.size(), mx_suffix) == 0) {
    const std::string wname = t.name.substr(0, t.name.size() - mx_suffix.size());
    auto ws = src.find(wname);
    for (const TensorSpec& w : side.tensors) {
      if (w.name == wname && ws != src.end() && w.dtype == DType::kF8E4M3 &&
          ws->second != DType::kF8E4M3) {
        out = testing::ExpectedConverted(t, ws->second, &w, options.seed, options.fp8_block);
      }
    }
  }
  const std::string suffix = "_scale_inv";
  if (sd == src.end() && t.name.size() > suffix.size() &&
      t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string wname = t.name.substr(0, t.name.size() - suffix.size());
    auto ws = src.find(wname);
    for (const TensorSpec& w : side.tensors) {
      if (w.name == wname && ws != src.end() && w.dtype == DType::kF8E4M3 &&
          ws->second != DType::kF8E4M3) {
        out = testing::ExpectedConverted(t, ws->second, &w, options.seed, options.fp8_block);
      }
    }
  }
  return out.empty() ? nullptr : &out;
}

std::map<std::string, DType> SourceDTypes(const SideLayout& trainer) {
  std::map<std::string, DType> out;
  for (const TensorSpec& t : trainer.tensors) out[t.name] = t.dtype;
  return out;
}

absl::Status CheckPattern(const SideLayout& side, const HostBuffers& buffers,
                          PatternOptions options) {
  std::vector<std::string> bad;
  int64_t nbad = 0;
  std::map<std::string, std::vector<uint8_t>> converted;
  for (const Record& r : side.records) {
    if (!Selected(r, options)) continue;
    const TensorSpec& t = side.tensors[r.tensor];
    const int64_t es = DTypeSize(t.dtype);
    const uint64_t h = NameHash(t.name);
    const std::vector<uint8_t>* want = ExpectedFor(side, t, options, &converted);
    ForEachRow(r, t, es, [&](int32_t buffer, const std::vector<int64_t>& inner,
                             int64_t off, int64_t lin,
                             const Box::Indices& row_start) {
      const uint8_t* b = buffers[buffer];
      for (size_t j = 0; j < inner.size(); ++j) {
        const int64_t k = lin + static_cast<int64_t>(j);
        uint8_t expect[8];
        if (want != nullptr) {
          std::memcpy(expect, want->data() + k * es, es);
        } else {
          const uint64_t w =
              testing::FiniteWord(t.dtype, PatternWord(h, k, ElementSeed(options, h, k)));
          std::memcpy(expect, &w, 8);
        }
        const uint8_t* p = b + off + inner[j];
        bool ok = std::memcmp(p, expect, es) == 0;
        if (!ok && want != nullptr && t.transform == Transform::kNegExp) {
          // -exp: within one ulp of the reference (a device's exp may differ).
          int32_t a, e;
          std::memcpy(&a, p, 4);
          std::memcpy(&e, expect, 4);
          ok = (a ^ e) >= 0 && (a - e == 1 || e - a == 1);
        }
        if (!ok && ++nbad <= 10) {
          Box::Indices g = row_start;
          if (!g.empty()) g.back() += static_cast<int64_t>(j);
          bad.push_back(absl::StrCat(
              "tensor ", t.name, " element [", absl::StrJoin(g, ", "), "] on rank ",
              r.rank, " buffer ", side.buffers[buffer].name, " byte ", off + inner[j],
              " is wrong"));
        }
      }
    });
  }
  if (nbad == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(nbad, " wrong elements: ",
                                          absl::StrJoin(bad, "; ")));
}

}  // namespace refit
