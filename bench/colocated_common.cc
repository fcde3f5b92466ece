// The colocated benchmark's cases, arenas and patterns (see colocated_common.h).
#include "bench/colocated_common.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/cuda/pack_kernels.h"
#include "exec/pull/cuda/pull_kernels.h"
#include "testing/gpu_pattern.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit::bench {
namespace {

template <typename F>
absl::Status Driver(const char* name, F* f) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess) return absl::InternalError(name);
  *f = reinterpret_cast<F>(p);
  return absl::OkStatus();
}

// `bytes` of device 0 memory as PyTorch's expandable segments make it: one
// reserved range, mapped in 20 MiB cuMem allocations (each its own
// cuMemCreate, shareable as a POSIX file descriptor).
absl::StatusOr<char*> AllocateVmm(int64_t bytes) {
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  REFIT_RETURN_IF_ERROR(Driver("cuMemCreate", &create));
  REFIT_RETURN_IF_ERROR(Driver("cuMemAddressReserve", &reserve));
  REFIT_RETURN_IF_ERROR(Driver("cuMemMap", &map));
  REFIT_RETURN_IF_ERROR(Driver("cuMemSetAccess", &access));
  const int64_t chunk = 20LL << 20;
  const int64_t total = (bytes + chunk - 1) / chunk * chunk;
  CUdeviceptr va = 0;
  if (reserve(&va, total, 0, 0, 0) != CUDA_SUCCESS) return absl::InternalError("cuMemAddressReserve");
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (int64_t o = 0; o < total; o += chunk) {
    CUmemGenericAllocationHandle h;
    if (create(&h, chunk, &prop, 0) != CUDA_SUCCESS) return absl::InternalError("cuMemCreate");
    if (map(va + o, chunk, 0, h, 0) != CUDA_SUCCESS) return absl::InternalError("cuMemMap");
  }
  CUmemAccessDesc acc = {};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (access(va, total, &acc, 1) != CUDA_SUCCESS) return absl::InternalError("cuMemSetAccess");
  return reinterpret_cast<char*>(va);
}

}  // namespace

absl::StatusOr<Case> CaseNamed(const std::string& name, const std::string& moe_model) {
  if (name == "8b") return Case{name, "qwen3-8b", "megatron:tp=1", "vllm:tp=1", 1};
  if (name == "tp2") return Case{name, "qwen3-8b", "megatron:tp=2", "vllm:tp=1", 2};
  // Quantized engines: the trainer's BF16 into vLLM's FP8 (128 x 128
  // blocks), MXFP8 (1 x 32) or NVFP4 (1 x 16, global scales) parameters,
  // quantized on pull or in two passes.
  if (name == "8b-fp8") return Case{name, "qwen3-8b", "megatron:tp=1", "vllm:tp=1,quant=fp8", 1};
  if (name == "8b-mx") return Case{name, "qwen3-8b", "megatron:tp=1", "vllm:tp=1,quant=mxfp8", 1};
  if (name == "8b-nv") return Case{name, "qwen3-8b", "megatron:tp=1", "vllm:tp=1,quant=nvfp4", 1};
  if (name == "moe") {
    return Case{name, moe_model, "megatron:tp=1,experts=indexed", "vllm:tp=1", 1};
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown case ", name));
}

// The plan of a case (every process builds the same one).
absl::StatusOr<Plan> CasePlan(const Case& c, bool hf_source) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(c.model));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts,
                         ParseTrainerSpec(hf_source ? "fsdp:dp=1" : c.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(c.engine));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  PlannerOptions o;
  o.num_lanes = 1;
  return BuildPlan(std::move(src.layout), std::move(dst.layout), o);
}



absl::StatusOr<SideLayout> CaseTrainerLayout(const Case& c) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(c.model));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(c.trainer));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  return std::move(src.layout);
}

absl::StatusOr<Arena> Allocate(const SideLayout& side, int rank, int fill, bool vmm) {
  Arena a;
  a.offset.assign(side.buffers.size(), -1);
  for (size_t b = 0; b < side.buffers.size(); ++b) {
    if (side.buffers[b].rank != rank) continue;
    a.offset[b] = a.bytes;
    a.bytes += (side.buffers[b].byte_size + 255) / 256 * 256;
  }
  if (vmm) {
    REFIT_ASSIGN_OR_RETURN(a.base, AllocateVmm(std::max<int64_t>(a.bytes, 256)));
    a.vmm = true;
  } else {
    // Rounded up to 2 MiB, as PyTorch's caching allocator rounds large
    // segments.
    const int64_t size = (std::max<int64_t>(a.bytes, 256) + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    CK(cudaMalloc(reinterpret_cast<void**>(&a.base), size));
  }
  CK(cudaMemset(a.base, fill, a.bytes));
  return a;
}

// Slice buffer pointers from the full side's (own buffers keep names).
std::vector<char*> SlicePointers(const SideLayout& full, const SideLayout& slice, int rank,
                                 const Arena& a) {
  std::map<std::string, char*> by_name;
  for (size_t b = 0; b < full.buffers.size(); ++b) {
    if (full.buffers[b].rank == rank) by_name[full.buffers[b].name] = a.base + a.offset[b];
  }
  std::vector<char*> p(slice.buffers.size(), nullptr);
  for (size_t b = 0; b < slice.buffers.size(); ++b) {
    if (slice.buffers[b].rank != rank) continue;
    auto it = by_name.find(slice.buffers[b].name);
    if (it != by_name.end()) p[b] = it->second;
  }
  return p;
}

// The pattern on the GPU (testing/gpu_pattern.h).
absl::Status Pattern(const SideLayout& side, int rank, const Arena& a, uint64_t seed,
                     bool check) {
  return testing::DevicePattern(side, rank, a.Pointers(), seed, check);
}

// The first `max_records` records of `rank` filled or checked on the host
// (testing/reference_copy.h), through host copies of their buffers: the
// GPU pattern checked against the host's definition.
absl::Status PatternOnHost(const SideLayout& side, int rank, const Arena& a, uint64_t seed,
                           bool check, int max_records) {
  SideLayout part;
  part.world_size = side.world_size;
  part.tensors = side.tensors;
  part.buffers = side.buffers;
  for (const Record& r : side.records) {
    if (r.rank != rank) continue;
    if (static_cast<int>(part.records.size()) >= max_records) break;
    part.records.push_back(r);
  }
  std::set<int32_t> bufs;
  ForEachPatternRow(part, {}, [&](const Record&, int32_t b, const std::vector<int64_t>&,
                                  int64_t, int64_t) { bufs.insert(b); });
  std::map<int32_t, std::vector<uint8_t>> host;
  HostBuffers ptrs(side.buffers.size(), nullptr);
  for (int32_t b : bufs) {
    host[b].resize(side.buffers[b].byte_size);
    ptrs[b] = host[b].data();
    CK(cudaMemcpy(ptrs[b], a.base + a.offset[b], side.buffers[b].byte_size,
                  cudaMemcpyDeviceToHost));
  }
  if (check) return CheckPattern(part, ptrs, {rank, seed});
  FillPattern(part, ptrs, {rank, seed});
  for (int32_t b : bufs) {
    CK(cudaMemcpy(a.base + a.offset[b], ptrs[b], side.buffers[b].byte_size,
                  cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

// The checksum of every non-padding byte of `rank`'s buffers, XORed with key.
absl::StatusOr<unsigned long long> Checksum(const SideLayout& side, int rank, const Arena& a,
                                            uint8_t key) {
  unsigned long long* d = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(*d)));
  CK(cudaMemset(d, 0, sizeof(*d)));
  for (size_t b = 0; b < side.buffers.size(); ++b) {
    if (side.buffers[b].rank != rank) continue;
    std::vector<ByteRange> pad = side.buffers[b].padding;
    std::sort(pad.begin(), pad.end(),
              [](const ByteRange& x, const ByteRange& y) { return x.begin < y.begin; });
    int64_t at = 0;
    pad.push_back({side.buffers[b].byte_size, 0});
    for (const ByteRange& p : pad) {
      if (p.begin > at) {
        CK(static_cast<cudaError_t>(
            cuda::LaunchChecksum(a.base + a.offset[b] + at, p.begin - at, key, d, nullptr)));
      }
      at = std::max(at, p.end());
    }
  }
  unsigned long long h = 0;
  CK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

uint8_t Key(int round) { return round <= 1 ? 0 : static_cast<uint8_t>((round * 37) | 1); }

}  // namespace refit::bench
