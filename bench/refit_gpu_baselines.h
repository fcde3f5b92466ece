// What refit_gpu_bench measures refit against on the GPUs of one host: raw
// NCCL of the same bytes, the 1 GiB-bucket broadcast RL frameworks do, and
// the plan's rounds without any copies. Each returns mean seconds over
// `iters` runs after a warm-up; a CUDA or NCCL error is returned naming the
// call.
#ifndef REFIT_BENCH_REFIT_GPU_BASELINES_H_
#define REFIT_BENCH_REFIT_GPU_BASELINES_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "exec/transport/transport.h"
#include "layout/side.h"
#include "plan/plan.h"

namespace refit {
namespace gpu_bench {

// Bytes between every (src rank, dst rank) of the plan, and every segment
// as (src, dst, bytes) for the uncoalesced baseline.
struct PairBytes {
  std::map<std::pair<int, int>, int64_t> pair;
  std::vector<std::tuple<int, int, int64_t>> segments;
};
PairBytes CountPairs(const Plan& plan);

// Raw NCCL: `ops` (src global, dst global, bytes) of global rank `g`, all
// posted in one group per iteration.
absl::StatusOr<double> RawNccl(ncclComm_t comm, cudaStream_t s, int g,
                               const std::vector<std::tuple<int, int, int64_t>>& ops,
                               int iters);

// Broadcast baseline, as most RL frameworks do it: per 1 GiB bucket of the
// model, the trainer ranks first gather their shares on trainer rank 0
// (`tcomm`, trainer position `tpos`; null or size 1: no gather, which
// flatters the baseline), then trainer 0 broadcasts the bucket on `bcomm`
// ({trainer 0, every engine rank}, position `bpos`, root 0; null: not a
// member) and each engine keeps `keep` of it (copied out of the bucket).
absl::StatusOr<double> Broadcast(ncclComm_t bcomm, ncclComm_t tcomm, cudaStream_t s,
                                 int bpos, int tpos, int tsize, int64_t total, double keep,
                                 int iters);

// The plan's rounds on `t`'s lanes with no copies at all: every message
// sent from / received into scratch memory (a lane's round at offset 0 of
// that lane's scratch). What the round structure alone costs next to raw
// NCCL.
absl::StatusOr<double> RoundsOnly(const Plan& plan, Side side, int rank, Transport* t,
                                  int iters);

}  // namespace gpu_bench
}  // namespace refit

#endif  // REFIT_BENCH_REFIT_GPU_BASELINES_H_
