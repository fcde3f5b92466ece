// Round digests: per (engine rank, tensor) sums of the position-keyed
// digest, from a sender's packed stream or a receiver's buffers.
#include "exec/delta/round_digest.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
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

// Appends one run per row of `region` (inside `stream_box`, both global
// tensor coordinates) of a stream that holds stream_box row-major from
// `offset`, each element keyed by its byte offset in the whole tensor.
absl::Status RegionRuns(const Box& stream_box, const Box& region, int32_t engine_rank,
                        int32_t tensor, const TensorSpec& t, int64_t es, int64_t offset,
                        std::vector<StreamDigestRun>* runs) {
  const int rank = region.rank();
  const int eb = DigestElementBytes(es);
  if (rank == 0) {
    REFIT_ASSIGN_OR_RETURN(uint64_t key, MakePositionKey(tensor, 0));
    runs->push_back({offset, es, eb, key, engine_rank, tensor});
    return absl::OkStatus();
  }
  if (static_cast<int>(t.shape.size()) != rank || stream_box.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": segment box ",
                                                   region.ToString(), " of another rank"));
  }
  if (!Contains(stream_box, region)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": region ",
                                                   region.ToString(), " outside the segment box ",
                                                   stream_box.ToString()));
  }
  const int64_t row = region.shape(rank - 1);
  int64_t rows = 1;
  for (int d = 0; d + 1 < rank; ++d) rows *= region.shape(d);
  if (row == 0 || rows == 0) return absl::OkStatus();
  std::vector<int64_t> idx(rank, 0);  // region-relative, last dim 0
  for (int64_t k = 0; k < rows; ++k) {
    int64_t linear = 0, in_stream = 0;
    for (int d = 0; d < rank; ++d) {
      const int64_t at = region.origin(d) + idx[d];
      linear = linear * t.shape[d] + at;
      in_stream = in_stream * stream_box.shape(d) + at - stream_box.origin(d);
    }
    const int64_t from = offset + in_stream * es;
    REFIT_ASSIGN_OR_RETURN(uint64_t key, MakePositionKey(tensor, linear * es));
    const uint64_t last = (key & static_cast<uint64_t>(kDigestMaxOffset)) + row * es;
    if (last > static_cast<uint64_t>(kDigestMaxOffset) + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": a row passes the digest's key range"));
    }
    // A row that continues the previous one in both the stream and the
    // tensor extends it: a whole-row box is one run.
    StreamDigestRun* prev = runs->empty() ? nullptr : &runs->back();
    if (prev != nullptr && prev->engine_rank == engine_rank && prev->tensor == tensor &&
        prev->element_bytes == eb && prev->offset + prev->bytes == from &&
        prev->first_key + static_cast<uint64_t>(prev->bytes) == key) {
      prev->bytes += row * es;
    } else {
      runs->push_back({from, row * es, eb, key, engine_rank, tensor});
    }
    for (int d = rank - 2; d >= 0; --d) {  // next row
      if (++idx[d] < region.shape(d)) break;
      idx[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddDigests(const DigestSums& b, DigestSums* a) {
  for (const auto& [k, v] : b) (*a)[k] += v;
}

absl::Status AppendStreamDigestRuns(const Plan& plan, const Message& m,
                                   std::vector<StreamDigestRun>* runs) {
  return ForEachSegment(plan, m, [&](const Segment& seg, const Record& r, const TensorSpec& t,
                                     int64_t es, int64_t offset) -> absl::Status {
    return RegionRuns(seg.box, seg.box, m.dst_rank, r.tensor, t, es, offset, runs);
  });
}

absl::Status AppendRegionDigestRuns(const Plan& plan, int32_t engine_rank, int32_t dst_record,
                                    const Box& stream_box, int64_t offset, const Box& region,
                                    std::vector<StreamDigestRun>* runs) {
  if (dst_record < 0 || static_cast<size_t>(dst_record) >= plan.dst.records.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine record ", dst_record, " outside the plan"));
  }
  const Record& r = plan.dst.records[dst_record];
  const TensorSpec& t = plan.dst.tensors[r.tensor];
  return RegionRuns(stream_box, region, engine_rank, r.tensor, t, DTypeSize(t.dtype), offset,
                    runs);
}

absl::Status DigestMessageStream(const Plan& plan, const Message& m, const char* stream,
                                 DigestSums* sums) {
  std::vector<StreamDigestRun> runs;
  REFIT_RETURN_IF_ERROR(AppendStreamDigestRuns(plan, m, &runs));
  for (const StreamDigestRun& r : runs) {
    REFIT_ASSIGN_OR_RETURN(uint64_t x,
                           DigestRun(stream + r.offset, r.bytes, r.element_bytes, r.first_key));
    (*sums)[{r.engine_rank, r.tensor}] += x;
  }
  return absl::OkStatus();
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
    std::vector<StreamDigestRun> runs;
    REFIT_RETURN_IF_ERROR(RegionRuns(seg.box, seg.box, m.dst_rank, r.tensor, t, es, 0, &runs));
    for (const StreamDigestRun& run : runs) {
      REFIT_ASSIGN_OR_RETURN(uint64_t x, DigestRun(scratch.data() + run.offset, run.bytes,
                                                   run.element_bytes, run.first_key));
      (*sums)[{m.dst_rank, r.tensor}] += x;
    }
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
