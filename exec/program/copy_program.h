// CopyProgram: one rank's part of one plan Message as a short list of 2-D
// byte copies between the rank's buffers and the message's packed stream.
//
// A message's packed stream is its segments in order, each box in row-major
// order (design.md, "Packed message format"). The sender packs (buffer ->
// stream), the receiver unpacks (stream -> buffer); a same-process copy goes
// buffer -> buffer directly. Each CopyTask copies `rows` rows of `row_bytes`
// bytes; row i starts at src_offset + i * src_row_stride and lands at
// dst_offset + i * dst_row_stride. Element runs are merged into as few tasks
// as possible. The same tasks drive the CPU memcpy loops (RunCopyTasksHost)
// and the CUDA kernels (pack_kernels.h).
#ifndef REFIT_EXEC_PROGRAM_COPY_PROGRAM_H_
#define REFIT_EXEC_PROGRAM_COPY_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/program/resolved_copy.h"
#include "plan/plan.h"

namespace refit {

// kStream as a buffer index means "the message's packed stream" (offsets
// relative to the start of the message).
inline constexpr int32_t kStream = -1;

struct CopyTask {
  int32_t src_buffer = kStream;  // index into the side's buffers, or kStream
  int32_t dst_buffer = kStream;
  int64_t src_offset = 0;  // bytes
  int64_t dst_offset = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t src_row_stride = 0;
  int64_t dst_row_stride = 0;
  friend bool operator==(const CopyTask& a, const CopyTask& b) {
    return a.src_buffer == b.src_buffer && a.dst_buffer == b.dst_buffer &&
           a.src_offset == b.src_offset && a.dst_offset == b.dst_offset &&
           a.rows == b.rows && a.row_bytes == b.row_bytes &&
           a.src_row_stride == b.src_row_stride &&
           a.dst_row_stride == b.dst_row_stride;
  }
};

// Sender side: buffer (of plan.src; of plan.dst for a relay, m.relay) ->
// stream, for message `m`.
// INVALID_ARGUMENT naming the tensor if a segment is not inside its record.
absl::StatusOr<std::vector<CopyTask>> PackProgram(const Plan& plan,
                                                  const Message& m);

// Receiver side: stream -> buffer (of plan.dst), for message `m`.
absl::StatusOr<std::vector<CopyTask>> UnpackProgram(const Plan& plan,
                                                    const Message& m);

// Same-process copy: src buffer -> dst buffer for message `m` (the source
// rank's buffers to the destination rank's buffers, no stream).
absl::StatusOr<std::vector<CopyTask>> DirectProgram(const Plan& plan,
                                                    const Message& m);

// Lower-level: the tasks copying the part `sub` of record `r` (elements of
// `elem_size` bytes) to the stream (to_stream) or from it, the box's first
// element at stream offset `stream_offset`. Appended to *out, merged with
// its last task where possible.
absl::Status AppendRecordTasks(const Record& r, int64_t elem_size,
                               const Box& sub, int64_t stream_offset,
                               bool to_stream, std::vector<CopyTask>* out);

// Bytes moved by tasks (sum of rows * row_bytes).
int64_t TaskBytes(absl::Span<const CopyTask> tasks);

// Resolves tasks to ResolvedCopy (resolved_copy.h): buffer b -> buffers[b], kStream -> stream_src (as a
// source) or stream_dst (as a destination). Returns INVALID_ARGUMENT if a
// buffer index is out of range or its pointer is null.
absl::StatusOr<std::vector<ResolvedCopy>> ResolveTasks(
    absl::Span<const CopyTask> tasks, absl::Span<char* const> src_buffers,
    absl::Span<char* const> dst_buffers, const char* stream_src,
    char* stream_dst);

// Runs resolved copies on the CPU (memcpy per row; one memcpy when the rows
// are contiguous on both sides).
void RunCopiesHost(absl::Span<const ResolvedCopy> copies);

}  // namespace refit

#endif  // REFIT_EXEC_PROGRAM_COPY_PROGRAM_H_
