// The colocated benchmark's baselines on one GPU, in one process: the floor
// (one cudaMemcpy of the refit's bytes), per-tensor strided copies (what an
// in-process weight loader does) and 1 GiB buckets (a bucketed CUDA IPC
// refit without its handshake costs).
#ifndef REFIT_TOOLS_BENCH_COLOCATED_BASELINES_H_
#define REFIT_TOOLS_BENCH_COLOCATED_BASELINES_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "bench/colocated_common.h"

namespace refit::bench {

// Times the baselines of case `c`, `iters` rounds each after a warm-up, and
// checks the bytes. Returns the result's key=value pairs (milliseconds per
// refit, checks); INTERNAL with a CUDA error.
absl::StatusOr<std::map<std::string, std::string>> Baselines(const Case& c, int iters);

}  // namespace refit::bench

#endif  // REFIT_TOOLS_BENCH_COLOCATED_BASELINES_H_
