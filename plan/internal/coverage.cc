// The destination coverage check: exact, per buffer, over sorted byte runs.
#include "plan/internal/coverage.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "plan/internal/errors.h"
#include "plan/internal/segment_range.h"

namespace refit {
namespace internal_plan {
namespace {

constexpr int64_t kMaxCoverageRuns = 1 << 20;

}  // namespace

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

}  // namespace internal_plan
}  // namespace refit
