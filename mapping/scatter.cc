#include "mapping/scatter.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "layout/tensor_spec.h"

namespace refit {
namespace {

// Calls copy(full_byte_offset, buffer_byte_offset, bytes) for every run of
// the record's part of `full` (runs of the innermost dim when it is
// contiguous in the buffer, else single elements).
template <typename F>
absl::Status ForEachRun(const SideLayout& side, const Record& r,
                        int64_t member, int64_t full_size,
                        int64_t buffer_size, F copy) {
  const TensorSpec& t = side.tensors[r.tensor];
  const int64_t es = DTypeSize(t.dtype);
  const int rank = r.box.rank();
  std::vector<int64_t> shape = t.shape;
  std::vector<int64_t> origin(r.box.origin().begin(), r.box.origin().end());
  std::vector<int64_t> extent(r.box.shape().begin(), r.box.shape().end());
  int first_dim = 0;
  int64_t rel0 = 0;  // record-relative index of the member in dim 0
  if (member >= 0) {
    if (!t.stacked || rank == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " is not stacked"));
    }
    if (member < r.box.origin(0) || member >= r.box.limit(0)) {
      return absl::OkStatus();
    }
    rel0 = member - r.box.origin(0);
    first_dim = 1;
  }
  int64_t want = es;
  for (int d = first_dim; d < rank; ++d) want *= shape[d];
  if (full_size != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", member >= 0 ? MemberName(t, member) : t.name, ": ",
        full_size, " bytes given, ", want, " expected"));
  }
  if (buffer_size != side.buffers[r.buffer].byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer ", side.buffers[r.buffer].name, " on rank ", r.rank, ": ",
        buffer_size, " bytes given, ", side.buffers[r.buffer].byte_size,
        " expected"));
  }
  int64_t n = 1;
  for (int d = first_dim; d < rank; ++d) n *= extent[d];
  if (n == 0) return absl::OkStatus();
  const int last = rank - 1;
  const bool run = rank > first_dim && r.dims[last].splits.size() == 1 &&
                   r.dims[last].splits[0].stride == 1;
  const int64_t run_len = run ? extent[last] : 1;
  std::vector<int64_t> idx(rank, 0);
  if (first_dim == 1) idx[0] = rel0;
  const int64_t base0 = member >= 0 ? DimOffset(r.dims[0], rel0) : 0;
  for (int64_t k = 0; k < n; k += run_len) {
    int64_t off = base0, flat = 0;
    for (int d = first_dim; d < rank; ++d) {
      off += DimOffset(r.dims[d], idx[d]);
      flat = flat * shape[d] + origin[d] + idx[d];
    }
    copy(flat * es, r.byte_offset + off * es, run_len * es);
    for (int d = run ? last - 1 : last; d >= first_dim; --d) {
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ScatterToRecord(const SideLayout& side, const Record& r,
                             int64_t member, absl::Span<const uint8_t> full,
                             absl::Span<uint8_t> buffer) {
  return ForEachRun(side, r, member, full.size(), buffer.size(),
                    [&](int64_t f, int64_t b, int64_t len) {
                      std::memcpy(buffer.data() + b, full.data() + f, len);
                    });
}

absl::Status GatherFromRecord(const SideLayout& side, const Record& r,
                              int64_t member, absl::Span<const uint8_t> buffer,
                              absl::Span<uint8_t> full) {
  return ForEachRun(side, r, member, full.size(), buffer.size(),
                    [&](int64_t f, int64_t b, int64_t len) {
                      std::memcpy(full.data() + f, buffer.data() + b, len);
                    });
}

}  // namespace refit
