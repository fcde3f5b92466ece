// The two-GPU colocated benchmark's copy table: for one case, how fast each
// way of moving an engine rank's bytes runs, both GPUs at once, in one
// process (peer access enabled): one cudaMemcpyPeerAsync of the bytes read
// from the other GPU (the peer floor), one device copy of the bytes read
// from its own GPU (the local floor), the pull kernel over the peer
// copies, the copy engines over them (a cudaMemcpyAsync per contiguous
// run, cudaMemcpy2DAsync per strided copy), the pull kernel over the local
// copies, over all (one kernel), the two at once (kernel for local, copy
// engines for peer; and with strided peer rows shorter than
// `min_row_bytes` left to the kernel), and NCCL send/recv of the peer bytes.
#ifndef REFIT_BENCH_COLOCATED_GPUS_COPIES_H_
#define REFIT_BENCH_COLOCATED_GPUS_COPIES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/colocated_gpus_common.h"

namespace refit::bench {

// Measures `c` (`iters` timed runs after a warm-up each) and appends one
// table line per way to `table`. Returns the key=value results (ms per
// way, bytes per GPU, the engine bytes' check after the one-kernel, the
// copy-engine and the hybrid ways); INTERNAL with a CUDA or NCCL error.
absl::StatusOr<std::map<std::string, std::string>> CopiesTable(
    const GpusCase& c, const std::string& model, int iters, int streams,
    std::vector<std::string>* table);

}  // namespace refit::bench

#endif  // REFIT_BENCH_COLOCATED_GPUS_COPIES_H_
