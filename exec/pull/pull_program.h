// PullProgram: what one destination rank copies straight out of its source
// peers' buffers when both share a host (the colocated data plane,
// exec/pull/cuda/pull_runner.h): every segment of every message the rank
// receives, as 2-D byte copies from a source buffer to one of its own
// buffers (DirectProgram per message). No staging, no packed stream.
//
// Slices renumber buffers (plan_codec.h, ExtractSlice) and drop the names of
// a peer's buffers, so a source buffer has different indices in the
// sender's and the receiver's slice. Both sides name the source buffers of
// one (source rank, destination rank) pair by their position in
// PairSourceBuffers, which lists them in the same order on both slices:
// messages of the pair in plan order, their segments in order, and every
// buffer of each segment's source record (all of an indexed record's
// buffers) at its first appearance. Relay messages (engine to engine,
// plan.h) are never pulled: these functions leave them out.
#ifndef REFIT_EXEC_PULL_PULL_PROGRAM_H_
#define REFIT_EXEC_PULL_PULL_PROGRAM_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "exec/program/copy_program.h"
#include "plan/plan.h"

namespace refit {

// The source buffers (indices into plan.src.buffers) that messages from
// `src_rank` to `dst_rank` read, in the pair's canonical order (see above).
// Empty when the pair has no message.
std::vector<int32_t> PairSourceBuffers(const Plan& plan, int32_t src_rank,
                                       int32_t dst_rank);

// The destination ranks `src_rank` sends to, ascending, those for which
// `include(dst_rank)` holds (all when `include` is empty).
std::vector<int32_t> PullReceivers(const Plan& plan, int32_t src_rank,
                                   const std::function<bool(int32_t)>& include = {});

// True when global ranks `a` and `b` (trainers first, then engines) are on
// one host by the plan's host_of_rank, or when the plan does not say
// (host_of_rank empty on a side: one host is assumed).
bool SameHost(const Plan& plan, int32_t a, int32_t b);

struct PullPeer {
  int32_t src_rank = 0;
  // PairSourceBuffers(plan, src_rank, this rank).
  std::vector<int32_t> buffers;
};

struct PullProgram {
  std::vector<PullPeer> peers;  // by ascending src_rank
  // src_buffer indexes plan.src.buffers, dst_buffer plan.dst.buffers (this
  // rank's own); never kStream.
  std::vector<CopyTask> tasks;
  int64_t bytes = 0;  // sum of the tasks' bytes
};

// The pull program of destination rank `dst_rank`: the messages it
// receives from every source rank for which `include(src_rank)` holds (all
// when `include` is empty). INVALID_ARGUMENT naming the tensor when a
// segment does not lie inside its records (DirectProgram).
absl::StatusOr<PullProgram> BuildPullProgram(
    const Plan& plan, int32_t dst_rank,
    const std::function<bool(int32_t)>& include = {});

}  // namespace refit

#endif  // REFIT_EXEC_PULL_PULL_PROGRAM_H_
