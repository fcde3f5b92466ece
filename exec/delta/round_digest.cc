// Round digests: per (engine rank, tensor) sums of the position-keyed
// digest, from a sender's packed stream or a receiver's buffers.
#include "exec/delta/round_digest.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/copy_program.h"
#include "exec/delta/region_digest.h"
#include "layout/dtype.h"

namespace refit {
namespace {

// The digest's element size for a dtype: its size when 1, 2, 4 or 8, else
// bytes one by one.
int DigestElementBytes(int64_t dtype_bytes) {
  return dtype_bytes == 1 || dtype_bytes == 2 || dtype_bytes == 4 || dtype_bytes == 8
             ? static_cast<int>(dtype_bytes)
             : 1;
}

// Calls fn(segment, its engine record, tensor, element bytes, stream
// offset) for every segment of `m`.
template <typename Fn>
absl::Status ForEachSegment(const Plan& plan, const Message& m, Fn fn) {
  int64_t stream = 0;
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const int32_t si = m.first_segment + i;
    if (si < 0 || static_cast<size_t>(si) >= plan.segments.size()) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", si, " outside the plan"));
    }
    const Segment& seg = plan.segments[si];
    if (seg.dst_record < 0 || static_cast<size_t>(seg.dst_record) >= plan.dst.records.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment ", si, ": engine record ", seg.dst_record, " outside the plan"));
    }
    const Record& r = plan.dst.records[seg.dst_record];
    const TensorSpec& t = plan.dst.tensors[r.tensor];
    REFIT_RETURN_IF_ERROR(fn(seg, r, t, DTypeSize(t.dtype), stream));
    stream += seg.bytes;
  }
  return absl::OkStatus();
}

// The digest of one segment's bytes in stream order (`data`, the box
// row-major), each element keyed by its byte offset in the whole tensor.
absl::StatusOr<uint64_t> DigestSegment(const Segment& seg, int32_t tensor,
                                       const TensorSpec& t, int64_t es, const char* data) {
  const Box& box = seg.box;
  const int rank = box.rank();
  if (rank == 0) {
    REFIT_ASSIGN_OR_RETURN(uint64_t key, MakePositionKey(tensor, 0));
    return DigestRun(data, es, DigestElementBytes(es), key);
  }
  if (static_cast<int>(t.shape.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": segment box ",
                                                   box.ToString(), " of another rank"));
  }
  const int64_t row = box.shape(rank - 1);
  int64_t rows = 1;
  for (int d = 0; d + 1 < rank; ++d) rows *= box.shape(d);
  if (row == 0 || rows == 0) return uint64_t{0};
  std::vector<int64_t> idx(rank, 0);  // box-relative, last dim 0
  uint64_t sum = 0;
  for (int64_t k = 0; k < rows; ++k) {
    int64_t linear = 0;
    for (int d = 0; d < rank; ++d) linear = linear * t.shape[d] + box.origin(d) + idx[d];
    REFIT_ASSIGN_OR_RETURN(uint64_t key, MakePositionKey(tensor, linear * es));
    REFIT_ASSIGN_OR_RETURN(uint64_t x,
                           DigestRun(data + k * row * es, row * es, DigestElementBytes(es), key));
    sum += x;
    for (int d = rank - 2; d >= 0; --d) {  // next row
      if (++idx[d] < box.shape(d)) break;
      idx[d] = 0;
    }
  }
  return sum;
}

}  // namespace

void AddDigests(const DigestSums& b, DigestSums* a) {
  for (const auto& [k, v] : b) (*a)[k] += v;
}

absl::Status DigestMessageStream(const Plan& plan, const Message& m, const char* stream,
                                 DigestSums* sums) {
  return ForEachSegment(plan, m, [&](const Segment& seg, const Record& r, const TensorSpec& t,
                                     int64_t es, int64_t offset) -> absl::Status {
    REFIT_ASSIGN_OR_RETURN(uint64_t x, DigestSegment(seg, r.tensor, t, es, stream + offset));
    (*sums)[{m.dst_rank, r.tensor}] += x;
    return absl::OkStatus();
  });
}

absl::Status DigestMessageTarget(const Plan& plan, const Message& m,
                                 const std::vector<char*>& buffers, DigestSums* sums) {
  std::vector<char> scratch;
  return ForEachSegment(plan, m, [&](const Segment& seg, const Record& r, const TensorSpec& t,
                                     int64_t es, int64_t) -> absl::Status {
    std::vector<CopyTask> tasks;
    absl::Status s = AppendRecordTasks(r, es, seg.box, 0, /*to_stream=*/true, &tasks);
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat("tensor ", t.name));
    scratch.resize(seg.bytes);
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> copies,
                           ResolveTasks(tasks, buffers, {}, nullptr, scratch.data()));
    RunCopiesHost(copies);
    REFIT_ASSIGN_OR_RETURN(uint64_t x, DigestSegment(seg, r.tensor, t, es, scratch.data()));
    (*sums)[{m.dst_rank, r.tensor}] += x;
    return absl::OkStatus();
  });
}

absl::Status CompareDigests(const Plan& plan, const DigestSums& trainers,
                            const DigestSums& engines) {
  auto name = [&](int32_t tensor) {
    return tensor >= 0 && static_cast<size_t>(tensor) < plan.dst.tensors.size()
               ? plan.dst.tensors[tensor].name
               : absl::StrCat("#", tensor);
  };
  for (const auto& [k, v] : trainers) {
    auto it = engines.find(k);
    if (it == engines.end()) {
      return absl::DataLossError(absl::StrCat("verify: engine rank ", k.first, " tensor ",
                                              name(k.second), ": no digest from the engine"));
    }
    if (it->second != v) {
      return absl::DataLossError(absl::StrCat(
          "verify: engine rank ", k.first, " tensor ", name(k.second), ": engine holds digest ",
          it->second, " but the trainers sent ", v));
    }
  }
  for (const auto& [k, v] : engines) {
    if (trainers.count(k) == 0) {
      return absl::DataLossError(absl::StrCat("verify: engine rank ", k.first, " tensor ",
                                              name(k.second), ": no digest from the trainers"));
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
