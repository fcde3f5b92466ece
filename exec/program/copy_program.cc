// CopyProgram: segments of a message -> merged 2-D byte copies.
#include "exec/program/copy_program.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"

namespace refit {
namespace {

// One contiguous run: `len` bytes at offset `buf` of buffer `buffer` <->
// stream offset `stream`.
struct Run {
  int64_t buf;
  int64_t stream;
  int64_t len;
  int32_t buffer;
};

// Appends the copy of one run (src/dst offsets and buffers given) to out,
// merging it into the last task when it extends it.
void AppendRun(int32_t src_buffer, int64_t src, int32_t dst_buffer,
               int64_t dst, int64_t len, std::vector<CopyTask>* out) {
  if (len <= 0) return;
  if (!out->empty()) {
    CopyTask& t = out->back();
    if (t.src_buffer == src_buffer && t.dst_buffer == dst_buffer) {
      if (t.rows == 1 && src == t.src_offset + t.row_bytes &&
          dst == t.dst_offset + t.row_bytes) {
        t.row_bytes += len;  // contiguous on both sides: one longer row
        return;
      }
      if (len == t.row_bytes) {
        if (t.rows == 1) {
          t.src_row_stride = src - t.src_offset;
          t.dst_row_stride = dst - t.dst_offset;
          t.rows = 2;
          return;
        }
        if (src == t.src_offset + t.rows * t.src_row_stride &&
            dst == t.dst_offset + t.rows * t.dst_row_stride) {
          ++t.rows;
          return;
        }
      }
    }
  }
  CopyTask t;
  t.src_buffer = src_buffer;
  t.dst_buffer = dst_buffer;
  t.src_offset = src;
  t.dst_offset = dst;
  t.rows = 1;
  t.row_bytes = len;
  t.src_row_stride = len;
  t.dst_row_stride = len;
  out->push_back(t);
}

// Calls fn(Run) for the part `sub` (inside r.box, in one buffer) of record
// r, in row-major order of sub, with stream offsets starting at
// stream_offset. Adjacent runs are merged.
template <typename Fn>
absl::Status ForEachRunInBuffer(const Record& r, int32_t buffer,
                                int64_t elem_size, const Box& sub,
                                int64_t stream_offset, Fn fn) {
  const int n = sub.rank();
  if (n != r.box.rank() || static_cast<int>(r.dims.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment box ", sub.ToString(), " does not match record box ",
        r.box.ToString()));
  }
  if (!Contains(r.box, sub)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment box ", sub.ToString(),
                     " is not inside record box ", r.box.ToString()));
  }
  if (n == 0) {
    fn(Run{r.byte_offset, stream_offset, elem_size, buffer});
    return absl::OkStatus();
  }
  for (int d = 0; d < n; ++d) {
    if (sub.shape(d) == 0) return absl::OkStatus();
  }
  // Innermost dim: contiguous element runs (element offset, count).
  std::vector<std::pair<int64_t, int64_t>> inner;
  const int last = n - 1;
  for (const DimPiece& p : DecomposeRange(
           r.dims[last], sub.origin(last) - r.box.origin(last),
           sub.shape(last))) {
    if (p.splits.empty()) continue;
    const DimSplit& in = p.splits.back();
    const int64_t run = in.stride == 1 ? in.size : 1;
    // Enumerate the piece's digits in mixed radix, stepping by `run`.
    const int levels = static_cast<int>(p.splits.size());
    std::vector<int64_t> digit(levels, 0);
    for (int64_t i = 0; i < p.count; i += run) {
      int64_t off = p.offset;
      for (int k = 0; k < levels; ++k) off += digit[k] * p.splits[k].stride;
      if (!inner.empty() &&
          inner.back().first + inner.back().second == off) {
        inner.back().second += run;
      } else {
        inner.emplace_back(off, run);
      }
      // Advance by `run` indices.
      int k = levels - 1;
      if (run == in.size && in.stride == 1) {
        digit[k] = 0;
        --k;
      } else {
        ++digit[k];
        if (digit[k] < p.splits[k].size) continue;
        digit[k] = 0;
        --k;
      }
      while (k >= 0) {
        if (++digit[k] < p.splits[k].size) break;
        digit[k] = 0;
        --k;
      }
    }
  }
  int64_t inner_bytes = sub.shape(last) * elem_size;
  // Outer dims: per-dim element offsets.
  std::vector<std::vector<int64_t>> outer(last);
  for (int d = 0; d < last; ++d) {
    outer[d].resize(sub.shape(d));
    const int64_t rel0 = sub.origin(d) - r.box.origin(d);
    for (int64_t i = 0; i < sub.shape(d); ++i) {
      outer[d][i] = DimOffset(r.dims[d], rel0 + i);
    }
  }
  std::vector<int64_t> idx(last, 0);
  int64_t stream = stream_offset;
  while (true) {
    int64_t base = 0;
    for (int d = 0; d < last; ++d) base += outer[d][idx[d]];
    int64_t s = stream;
    for (const auto& [off, count] : inner) {
      fn(Run{r.byte_offset + (base + off) * elem_size, s, count * elem_size,
             buffer});
      s += count * elem_size;
    }
    stream += inner_bytes;
    int d = last - 1;
    while (d >= 0) {
      if (++idx[d] < sub.shape(d)) break;
      idx[d] = 0;
      --d;
    }
    if (d < 0) break;
  }
  return absl::OkStatus();
}

// ForEachRunInBuffer over the parts of `sub` in each buffer of r (one part
// unless r is indexed: then one dim-0 slice per buffer, in order).
template <typename Fn>
absl::Status ForEachRun(const Record& r, int64_t elem_size, const Box& sub,
                        int64_t stream_offset, Fn fn) {
  if (sub.rank() != r.box.rank() || !Contains(r.box, sub)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment box ", sub.ToString(),
                     " is not inside record box ", r.box.ToString()));
  }
  if (r.buffer_step == 0 || sub.rank() == 0) {
    return ForEachRunInBuffer(r, r.buffer, elem_size, sub, stream_offset, fn);
  }
  const int64_t slice_bytes = sub.shape(0) == 0
                                  ? 0
                                  : UncheckedNumElements(sub) / sub.shape(0) *
                                        elem_size;
  absl::Status status;
  int64_t k = 0;
  ForEachBufferPart(r, sub, [&](int32_t buffer, const Box& part) {
    if (status.ok()) {
      status = ForEachRunInBuffer(r, buffer, elem_size, part,
                                  stream_offset + k * slice_bytes, fn);
    }
    ++k;
  });
  return status;
}

absl::Status CheckMessage(const Plan& plan, const Message& m) {
  if (m.first_segment < 0 || m.num_segments < 0 ||
      static_cast<size_t>(m.first_segment) + m.num_segments >
          plan.segments.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("message ", m.src_rank, "->", m.dst_rank,
                     " refers to segments outside the plan"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const Record*> GetRecord(const SideLayout& side, int32_t i,
                                        const char* what) {
  if (i < 0 || static_cast<size_t>(i) >= side.records.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " record ", i, " out of range"));
  }
  const Record& r = side.records[i];
  if (r.tensor < 0 || static_cast<size_t>(r.tensor) >= side.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " record ", i, " has a bad tensor index"));
  }
  return &r;
}

absl::StatusOr<std::vector<CopyTask>> OneSide(const Plan& plan,
                                              const Message& m, bool src) {
  REFIT_RETURN_IF_ERROR(CheckMessage(plan, m));
  // A relay's sender packs from the engine's own records.
  const SideLayout& side = src && !m.relay ? plan.src : plan.dst;
  std::vector<CopyTask> out;
  int64_t stream = 0;
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const Segment& seg = plan.segments[m.first_segment + i];
    REFIT_ASSIGN_OR_RETURN(
        const Record* r,
        GetRecord(side, src ? seg.src_record : seg.dst_record,
                  src ? "source" : "destination"));
    const TensorSpec& t = side.tensors[r->tensor];
    absl::Status s =
        AppendRecordTasks(*r, DTypeSize(t.dtype), seg.box, stream, src, &out);
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat("tensor ", t.name));
    stream += seg.bytes;
  }
  return out;
}

}  // namespace

absl::Status AppendRecordTasks(const Record& r, int64_t elem_size,
                               const Box& sub, int64_t stream_offset,
                               bool to_stream, std::vector<CopyTask>* out) {
  return ForEachRun(r, elem_size, sub, stream_offset, [&](const Run& run) {
    if (to_stream) {
      AppendRun(run.buffer, run.buf, kStream, run.stream, run.len, out);
    } else {
      AppendRun(kStream, run.stream, run.buffer, run.buf, run.len, out);
    }
  });
}

absl::StatusOr<std::vector<CopyTask>> PackProgram(const Plan& plan,
                                                  const Message& m) {
  return OneSide(plan, m, /*src=*/true);
}

absl::StatusOr<std::vector<CopyTask>> UnpackProgram(const Plan& plan,
                                                    const Message& m) {
  return OneSide(plan, m, /*src=*/false);
}

absl::StatusOr<std::vector<CopyTask>> DirectProgram(const Plan& plan,
                                                    const Message& m) {
  REFIT_RETURN_IF_ERROR(CheckMessage(plan, m));
  std::vector<CopyTask> out;
  int64_t stream = 0;
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const Segment& seg = plan.segments[m.first_segment + i];
    REFIT_ASSIGN_OR_RETURN(const Record* sr,
                           GetRecord(plan.src, seg.src_record, "source"));
    REFIT_ASSIGN_OR_RETURN(const Record* dr,
                           GetRecord(plan.dst, seg.dst_record, "destination"));
    const TensorSpec& t = plan.dst.tensors[dr->tensor];
    const int64_t es = DTypeSize(t.dtype);
    std::vector<Run> a, b;
    absl::Status s = ForEachRun(*sr, es, seg.box, stream,
                                [&](const Run& r) { a.push_back(r); });
    if (s.ok()) {
      s = ForEachRun(*dr, es, seg.box, stream,
                     [&](const Run& r) { b.push_back(r); });
    }
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat("tensor ", t.name));
    // Intersect the two run lists along the stream.
    size_t i1 = 0, i2 = 0;
    int64_t p = stream;
    while (i1 < a.size() && i2 < b.size()) {
      const Run& x = a[i1];
      const Run& y = b[i2];
      const int64_t end = std::min(x.stream + x.len, y.stream + y.len);
      AppendRun(x.buffer, x.buf + (p - x.stream), y.buffer,
                y.buf + (p - y.stream), end - p, &out);
      p = end;
      if (p == x.stream + x.len) ++i1;
      if (p == y.stream + y.len) ++i2;
    }
    stream += seg.bytes;
  }
  return out;
}

int64_t TaskBytes(absl::Span<const CopyTask> tasks) {
  int64_t n = 0;
  for (const CopyTask& t : tasks) n += t.rows * t.row_bytes;
  return n;
}

absl::StatusOr<std::vector<ResolvedCopy>> ResolveTasks(
    absl::Span<const CopyTask> tasks, absl::Span<char* const> src_buffers,
    absl::Span<char* const> dst_buffers, const char* stream_src,
    char* stream_dst) {
  std::vector<ResolvedCopy> out;
  out.reserve(tasks.size());
  for (const CopyTask& t : tasks) {
    ResolvedCopy c;
    if (t.src_buffer == kStream) {
      c.src = stream_src;
    } else if (t.src_buffer >= 0 &&
               static_cast<size_t>(t.src_buffer) < src_buffers.size()) {
      c.src = src_buffers[t.src_buffer];
    }
    if (t.dst_buffer == kStream) {
      c.dst = stream_dst;
    } else if (t.dst_buffer >= 0 &&
               static_cast<size_t>(t.dst_buffer) < dst_buffers.size()) {
      c.dst = dst_buffers[t.dst_buffer];
    }
    if (c.src == nullptr || c.dst == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "copy task between buffer ", t.src_buffer, " and buffer ",
          t.dst_buffer, " has no registered pointer"));
    }
    c.src += t.src_offset;
    c.dst += t.dst_offset;
    c.rows = t.rows;
    c.row_bytes = t.row_bytes;
    c.src_row_stride = t.src_row_stride;
    c.dst_row_stride = t.dst_row_stride;
    out.push_back(c);
  }
  return out;
}

void RunCopiesHost(absl::Span<const ResolvedCopy> copies) {
  for (const ResolvedCopy& c : copies) {
    if (c.rows == 1 || (c.src_row_stride == c.row_bytes &&
                        c.dst_row_stride == c.row_bytes)) {
      std::memmove(c.dst, c.src, c.rows * c.row_bytes);
      continue;
    }
    for (int64_t i = 0; i < c.rows; ++i) {
      std::memcpy(c.dst + i * c.dst_row_stride, c.src + i * c.src_row_stride,
                  c.row_bytes);
    }
  }
}

}  // namespace refit
