// What the colocated benchmark's programs share (bench/colocated_bench.cc):
// its cases and their plans, device arenas of a member's buffers (cudaMalloc
// or cuMem chunks as expandable segments make them), and the byte pattern
// written and checked in them.
#ifndef REFIT_TOOLS_BENCH_COLOCATED_COMMON_H_
#define REFIT_TOOLS_BENCH_COLOCATED_COMMON_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "exec/cuda/cuda_status.h"
#include "layout/layout.h"
#include "plan/plan.h"

// Returns the CUDA error (exec/cuda/cuda_status.h) from the enclosing
// function when `x` fails.
#define CK(x) REFIT_RETURN_IF_CUDA_ERROR(x)

namespace refit::bench {

// A benchmark case: the model, the trainer and engine conventions, and how
// many trainer processes it has.
struct Case {
  std::string name, model, trainer, engine;
  int trainers = 1;
};

// The case called `name` ("8b", "tp2", "8b-fp8", "8b-mx", "moe" with
// `moe_model`);
// INVALID_ARGUMENT otherwise.
absl::StatusOr<Case> CaseNamed(const std::string& name, const std::string& moe_model);

// The plan of a case (every process builds the same one); with
// `hf_source`, from HF tensors (one contiguous source buffer each). Fails
// with the mapping's or the planner's error.
absl::StatusOr<Plan> CasePlan(const Case& c, bool hf_source);

// The trainer layout of a case as registered (before conversions: its
// buffers are the first ones of CasePlan's source side).
absl::StatusOr<SideLayout> CaseTrainerLayout(const Case& c);

// One device arena per member, its buffers 256-byte aligned inside (as a
// caching allocator's segment holds tensors).
struct Arena {
  char* base = nullptr;
  int64_t bytes = 0;
  bool vmm = false;  // cuMem chunks (freed at exit)
  std::vector<int64_t> offset;  // per buffer of the side (-1: other rank)
  std::vector<char*> Pointers() const {
    std::vector<char*> p(offset.size(), nullptr);
    for (size_t b = 0; b < offset.size(); ++b) {
      if (offset[b] >= 0) p[b] = base + offset[b];
    }
    return p;
  }
};

// The arena of `rank`'s buffers of `side` on device 0, every byte `fill`;
// with `vmm`, in 20 MiB cuMem chunks of one reserved range (as PyTorch's
// expandable segments). INTERNAL with the CUDA error.
absl::StatusOr<Arena> Allocate(const SideLayout& side, int rank, int fill, bool vmm = false);

// The arena's buffers re-indexed like the slice's side `slice` (own
// buffers keep their names).
std::vector<char*> SlicePointers(const SideLayout& full, const SideLayout& slice, int rank,
                                 const Arena& a);

// Fills (check = false) or checks the pattern of `rank`'s records
// (testing/reference_copy.h: every element's PatternWord of version `seed`)
// in device memory, on the GPU (testing/gpu_pattern.h). Returns INTERNAL naming
// the first wrong element and how many are wrong, or with a CUDA error.
absl::Status Pattern(const SideLayout& side, int rank, const Arena& a, uint64_t seed,
                     bool check);

// The same on the host for the first `max_records` records of `rank` only,
// through host copies of their buffers (testing/reference_copy.h's
// FillPattern / CheckPattern): checks the GPU's pattern against the host's
// definition.
absl::Status PatternOnHost(const SideLayout& side, int rank, const Arena& a, uint64_t seed,
                           bool check, int max_records);

// The checksum of every non-padding byte of `rank`'s buffers, XORed with
// `key`; INTERNAL with a CUDA error.
absl::StatusOr<unsigned long long> Checksum(const SideLayout& side, int rank, const Arena& a,
                                            uint8_t key);

// The XOR key of round `round` (0 for the first).
uint8_t Key(int round);

}  // namespace refit::bench

#endif  // REFIT_TOOLS_BENCH_COLOCATED_COMMON_H_
