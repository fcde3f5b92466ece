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

// Calls fn(segment's engine tensor, element bytes, tasks stream -> engine
// buffer) for every segment of `m`.
template <typename Fn>
absl::Status ForEachSegmentTasks(const Plan& plan, const Message& m, Fn fn) {
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
    const int64_t es = DTypeSize(t.dtype);
    std::vector<CopyTask> tasks;
    absl::Status s = AppendRecordTasks(r, es, seg.box, stream, /*to_stream=*/false, &tasks);
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat("tensor ", t.name));
    REFIT_RETURN_IF_ERROR(fn(r.tensor, DigestElementBytes(es), tasks));
    stream += seg.bytes;
  }
  return absl::OkStatus();
}

absl::Status DigestTasks(const std::vector<CopyTask>& tasks, int eb, const char* stream,
                         const std::vector<char*>* buffers, uint64_t* sum) {
  for (const CopyTask& t : tasks) {
    for (int64_t row = 0; row < t.rows; ++row) {
      const int64_t dst = t.dst_offset + row * t.dst_row_stride;
      REFIT_ASSIGN_OR_RETURN(uint64_t key, MakePositionKey(t.dst_buffer, dst));
      const char* p;
      if (buffers != nullptr) {
        if (t.dst_buffer < 0 || static_cast<size_t>(t.dst_buffer) >= buffers->size() ||
            (*buffers)[t.dst_buffer] == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("engine buffer #", t.dst_buffer, " is not registered"));
        }
        p = (*buffers)[t.dst_buffer] + dst;
      } else {
        p = stream + t.src_offset + row * t.src_row_stride;
      }
      REFIT_ASSIGN_OR_RETURN(uint64_t d, DigestRun(p, t.row_bytes, eb, key));
      *sum += d;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddDigests(const DigestSums& b, DigestSums* a) {
  for (const auto& [k, v] : b) (*a)[k] += v;
}

absl::Status DigestMessageStream(const Plan& plan, const Message& m, const char* stream,
                                 DigestSums* sums) {
  return ForEachSegmentTasks(
      plan, m, [&](int32_t tensor, int eb, const std::vector<CopyTask>& tasks) {
        return DigestTasks(tasks, eb, stream, nullptr, &(*sums)[{m.dst_rank, tensor}]);
      });
}

absl::Status DigestMessageTarget(const Plan& plan, const Message& m,
                                 const std::vector<char*>& buffers, DigestSums* sums) {
  return ForEachSegmentTasks(
      plan, m, [&](int32_t tensor, int eb, const std::vector<CopyTask>& tasks) {
        return DigestTasks(tasks, eb, nullptr, &buffers, &(*sums)[{m.dst_rank, tensor}]);
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
