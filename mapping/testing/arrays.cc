#include "mapping/testing/arrays.h"

#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace refit {
namespace testing_mapping {
namespace {

int64_t Prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Calls f(rel_index, element offset relative to record origin) for every
// element of r.box in row-major order.
template <typename F>
void ForEachElement(const Record& r, F f) {
  const int rank = r.box.rank();
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= r.box.shape(d);
  if (n == 0) return;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += DimOffset(r.dims[d], idx[d]);
    f(idx, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < r.box.shape(d)) break;
      idx[d] = 0;
    }
  }
}

int64_t FlatIndex(const std::vector<int64_t>& shape, const Box& box,
                  const std::vector<int64_t>& rel) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    flat = flat * shape[d] + box.origin(d) + rel[d];
  }
  return flat;
}

}  // namespace

Arr Zeros(std::vector<int64_t> shape, DType dtype) {
  Arr a;
  a.shape = std::move(shape);
  a.dtype = dtype;
  a.bytes.assign(Prod(a.shape, 0, a.shape.size()) * a.esize(), 0);
  return a;
}

Arr Slice(const Arr& a, int dim, int64_t begin, int64_t size) {
  Arr out;
  out.shape = a.shape;
  out.shape[dim] = size;
  out.dtype = a.dtype;
  const int64_t outer = Prod(a.shape, 0, dim);
  const int64_t inner = Prod(a.shape, dim + 1, a.shape.size()) * a.esize();
  for (int64_t o = 0; o < outer; ++o) {
    const uint8_t* p = a.bytes.data() + (o * a.shape[dim] + begin) * inner;
    out.bytes.insert(out.bytes.end(), p, p + size * inner);
  }
  return out;
}

Arr Cat(int dim, const std::vector<Arr>& parts) {
  Arr out;
  out.shape = parts[0].shape;
  out.dtype = parts[0].dtype;
  out.shape[dim] = 0;
  for (const Arr& p : parts) out.shape[dim] += p.shape[dim];
  const int64_t outer = Prod(out.shape, 0, dim);
  for (int64_t o = 0; o < outer; ++o) {
    for (const Arr& p : parts) {
      const int64_t chunk =
          Prod(p.shape, dim, p.shape.size()) * p.esize();
      const uint8_t* s = p.bytes.data() + o * chunk;
      out.bytes.insert(out.bytes.end(), s, s + chunk);
    }
  }
  return out;
}

Arr Stack(const std::vector<Arr>& parts) {
  Arr out;
  out.shape = parts[0].shape;
  out.shape.insert(out.shape.begin(), static_cast<int64_t>(parts.size()));
  out.dtype = parts[0].dtype;
  for (const Arr& p : parts) {
    out.bytes.insert(out.bytes.end(), p.bytes.begin(), p.bytes.end());
  }
  return out;
}

Arr Member(const Arr& a, int64_t i) {
  Arr s = Slice(a, 0, i, 1);
  s.shape.erase(s.shape.begin());
  return s;
}

Arr PadRows(const Arr& a, int64_t rows) {
  if (rows == 0) return a;
  std::vector<int64_t> z = a.shape;
  z[0] = rows;
  return Cat(0, {a, Zeros(z, a.dtype)});
}

Ckpt FillCheckpoint(const std::vector<TensorSpec>& tensors, uint64_t seed) {
  Ckpt out;
  for (size_t t = 0; t < tensors.size(); ++t) {
    Arr a = Zeros(tensors[t].shape, tensors[t].dtype);
    uint64_t base = SplitMix(seed ^ (t * 0x100000001b3ULL));
    for (size_t i = 0; i < a.bytes.size(); ++i) {
      a.bytes[i] = static_cast<uint8_t>(SplitMix(base + i) >> 24);
    }
    out[tensors[t].name] = std::move(a);
  }
  return out;
}

absl::Status CheckRecords(const SideLayout& side,
                          const std::vector<std::vector<uint8_t>>& mem,
                          const Ckpt& ckpt) {
  for (const Record& r : side.records) {
    const TensorSpec& t = side.tensors[r.tensor];
    const Arr& full = ckpt.at(t.name);
    const int64_t es = DTypeSize(t.dtype);
    const std::vector<uint8_t>& buf = mem[r.buffer];
    absl::Status status;
    ForEachElement(r, [&](const std::vector<int64_t>& rel, int64_t off) {
      if (!status.ok()) return;
      const int64_t flat = FlatIndex(t.shape, r.box, rel);
      const int64_t at = r.byte_offset + off * es;
      if (at < 0 || at + es > static_cast<int64_t>(buf.size()) ||
          std::memcmp(buf.data() + at, full.bytes.data() + flat * es, es) !=
              0) {
        status = absl::InternalError(absl::StrCat(
            "record of ", DescribePart(t, r.box), " on rank ", r.rank,
            " in buffer ", side.buffers[r.buffer].name,
            " addresses wrong bytes at element ", flat));
      }
    });
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CopyElementwise(const SideLayout& src,
                             const std::vector<std::vector<uint8_t>>& src_mem,
                             const SideLayout& dst,
                             std::vector<std::vector<uint8_t>>* dst_mem) {
  std::unordered_map<std::string, std::vector<const Record*>> by_name;
  for (const Record& r : src.records) {
    by_name[src.tensors[r.tensor].name].push_back(&r);
  }
  for (const Record& d : dst.records) {
    const TensorSpec& t = dst.tensors[d.tensor];
    const int64_t es = DTypeSize(t.dtype);
    const std::vector<const Record*>& cands = by_name[t.name];
    absl::Status status;
    ForEachElement(d, [&](const std::vector<int64_t>& rel, int64_t off) {
      if (!status.ok()) return;
      std::vector<int64_t> g(rel.size());
      for (size_t k = 0; k < rel.size(); ++k) g[k] = d.box.origin(k) + rel[k];
      for (const Record* s : cands) {
        bool inside = true;
        for (size_t k = 0; k < g.size() && inside; ++k) {
          inside = g[k] >= s->box.origin(k) && g[k] < s->box.limit(k);
        }
        if (!inside) continue;
        int64_t soff = 0;
        for (size_t k = 0; k < g.size(); ++k) {
          soff += DimOffset(s->dims[k], g[k] - s->box.origin(k));
        }
        std::memcpy((*dst_mem)[d.buffer].data() + d.byte_offset + off * es,
                    src_mem[s->buffer].data() + s->byte_offset + soff * es,
                    es);
        return;
      }
      status = absl::FailedPreconditionError(absl::StrCat(
          "no source record holds an element of ", DescribePart(t, d.box)));
    });
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace testing_mapping
}  // namespace refit
