// What the two-GPU colocated benchmark's parts share
// (bench/colocated_gpus_bench.cc): its cases (Qwen3-8B, Megatron TP2 on
// GPUs 0-1 into vLLM on the same two GPUs) and their plans, with every
// rank placed on its GPU so that the planner takes replicas from the same
// GPU where it can.
#ifndef REFIT_BENCH_COLOCATED_GPUS_COMMON_H_
#define REFIT_BENCH_COLOCATED_GPUS_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/colocated_common.h"
#include "exec/program/resolved_copy.h"
#include "plan/plan.h"

namespace refit::bench {

// A two-GPU case: trainer rank r and engine rank r on GPU r.
struct GpusCase {
  std::string name;     // "tp2" or "dp2"
  std::string trainer;  // "megatron:tp=2"
  std::string engine;   // "vllm:tp=2" or "vllm:tp=1,dp=2"
};

// The case called `name` (tp2: vLLM TP2; dp2: vLLM TP1 x DP2); INVALID_ARGUMENT
// otherwise.
absl::StatusOr<GpusCase> GpusCaseNamed(const std::string& name);

// The plan of `c` for `model` (host 0 for every rank, GPU = rank on both
// sides). Fails with the mapping's or the planner's error.
absl::StatusOr<Plan> GpusCasePlan(const GpusCase& c, const std::string& model);

// The copies of engine rank `e` (its pull program resolved against the
// trainer arenas `trainers` and its own arena), split into those reading
// its own GPU (`local`, trainer rank e) and the other GPU (`peer`).
// INVALID_ARGUMENT from the program.
struct EngineCopies {
  std::vector<ResolvedCopy> local, peer;
  int64_t local_bytes = 0, peer_bytes = 0;
};
absl::StatusOr<EngineCopies> ResolveEngineCopies(const Plan& plan, int e,
                                                 const std::vector<Arena>& trainers,
                                                 const Arena& engine);

}  // namespace refit::bench

#endif  // REFIT_BENCH_COLOCATED_GPUS_COMMON_H_
