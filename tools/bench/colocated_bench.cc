// colocated_bench: colocated refit (trainer and engine on ONE GPU) measured
// against the floor and the usual alternatives, all from one run (built
// here, run on a GPU host from the bundle).
//
//   colocated_bench [--cases=8b,tp2,moe] [--iters=5] [--moe_model=qwen3-30b-a3b]
//                   [--item_kib=64]   (the pull kernel's work per thread block)
//
// Cases (engine vLLM TP1 on GPU 0 in every case):
//   8b   qwen3-8b, Megatron TP1 -> vLLM TP1
//   tp2  qwen3-8b, Megatron TP2 (two trainer processes) -> vLLM TP1
//   moe  --moe_model, Megatron TP1 with one buffer per expert
//        (experts=indexed) -> vLLM's fused w13 / w2
// Rows per case, times in ms per refit (mean over --iters after a warm-up):
//   floor       one cudaMemcpy device-to-device of the refit's bytes
//   pull-procs  refit's pull path (exec/cuda/pull_engine.h), trainer and
//               engine as separate processes (the trainer's time per round:
//               its ready event to every receiver's done message)
//   pull-vmm    (8b) pull-procs with the trainer's memory in 20 MiB cuMem
//               chunks of one range, as PyTorch's expandable_segments
//   pull-thrds  the same with every member a thread of one process
//   per-tensor  one strided-copy kernel per HF tensor from contiguous HF
//               tensors into the engine's fused parameters (what an
//               in-process weight loader does), one process
//   bucketed    1 GiB buckets: per bucket, the HF tensors are packed into
//               the bucket, then copied out per tensor into the engine's
//               parameters, with a stream synchronization per bucket (the
//               handshake of a bucketed CUDA IPC refit), one process: a
//               lower bound of that path (no IPC handshake costs)
// Checks: the pattern written into every trainer buffer (host-computed)
// is checked byte for byte in every engine buffer after round 1; every
// later round the trainers XOR their weights with a new key and the engine
// compares a position-dependent checksum of every byte with round 1's.
// Engine buffers are allocated once; their addresses never change. The
// last lines are one table. Exit 1 if any check fails.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/copy_program.h"
#include "exec/cuda/pack_kernels.h"
#include "exec/cuda/pull_engine.h"
#include "exec/cuda/pull_kernels.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/dir_kv_store.h"
#include "testing/flags.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      return absl::InternalError(absl::StrCat(#x, ": ", cudaGetErrorString(e_))); \
    }                                                                           \
  } while (0)

struct Case {
  std::string name, model, trainer, engine;
  int trainers = 1;
};

absl::StatusOr<Case> CaseNamed(const std::string& name, const std::string& moe_model) {
  if (name == "8b") return Case{name, "qwen3-8b", "megatron:tp=1", "vllm:tp=1", 1};
  if (name == "tp2") return Case{name, "qwen3-8b", "megatron:tp=2", "vllm:tp=1", 2};
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

absl::StatusOr<Arena> Allocate(const SideLayout& side, int rank, int fill, bool vmm = false) {
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
    CK(cudaMalloc(reinterpret_cast<void**>(&a.base), std::max<int64_t>(a.bytes, 256)));
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

// Fills (check = false) or checks the pattern of `rank`'s records in
// device memory, through host memory in batches of ~1 GiB (records that
// share a buffer stay in one batch), 16 threads per batch.
absl::Status Pattern(const SideLayout& side, int rank, const Arena& a, uint64_t seed,
                     bool check) {
  // Components of records sharing buffers, in record order.
  std::vector<int> recs;
  for (size_t r = 0; r < side.records.size(); ++r) {
    if (side.records[r].rank == rank) recs.push_back(static_cast<int>(r));
  }
  std::vector<int> parent(recs.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::map<int32_t, int> owner;
  auto buffers_of = [&](const Record& r) {
    std::vector<int32_t> b;
    const int64_t n = r.buffer_step > 0 && r.box.rank() > 0 ? r.box.shape(0) : 1;
    for (int64_t k = 0; k < n; ++k) b.push_back(RecordBuffer(r, k));
    return b;
  };
  for (size_t i = 0; i < recs.size(); ++i) {
    for (int32_t b : buffers_of(side.records[recs[i]])) {
      auto [it, fresh] = owner.emplace(b, static_cast<int>(i));
      if (!fresh) parent[find(static_cast<int>(i))] = find(it->second);
    }
  }
  std::map<int, std::vector<int>> comps;
  for (size_t i = 0; i < recs.size(); ++i) comps[find(static_cast<int>(i))].push_back(recs[i]);
  std::vector<std::vector<int>> batches(1);
  int64_t batch_bytes = 0;
  for (auto& [root, rs] : comps) {
    std::set<int32_t> bufs;
    for (int r : rs) {
      for (int32_t b : buffers_of(side.records[r])) bufs.insert(b);
    }
    int64_t bytes = 0;
    for (int32_t b : bufs) bytes += side.buffers[b].byte_size;
    if (batch_bytes > 0 && batch_bytes + bytes > (1LL << 30)) {
      batches.emplace_back();
      batch_bytes = 0;
    }
    batches.back().insert(batches.back().end(), rs.begin(), rs.end());
    batch_bytes += bytes;
  }
  const int nt = 16;
  for (const std::vector<int>& batch : batches) {
    std::set<int32_t> bufs;
    for (int r : batch) {
      for (int32_t b : buffers_of(side.records[r])) bufs.insert(b);
    }
    std::map<int32_t, std::vector<uint8_t>> host;
    HostBuffers ptrs(side.buffers.size(), nullptr);
    for (int32_t b : bufs) {
      host[b].resize(side.buffers[b].byte_size);
      ptrs[b] = host[b].data();
      if (check) {
        CK(cudaMemcpy(ptrs[b], a.base + a.offset[b], side.buffers[b].byte_size,
                      cudaMemcpyDeviceToHost));
      }
    }
    std::vector<SideLayout> parts(nt);
    for (int i = 0; i < nt; ++i) {
      parts[i].world_size = side.world_size;
      parts[i].tensors = side.tensors;
      parts[i].buffers = side.buffers;
    }
    for (size_t i = 0; i < batch.size(); ++i) parts[i % nt].records.push_back(side.records[batch[i]]);
    std::vector<absl::Status> st(nt);
    std::vector<std::thread> th;
    for (int i = 0; i < nt; ++i) {
      th.emplace_back([&, i] {
        if (check) {
          st[i] = CheckPattern(parts[i], ptrs, {rank, seed});
        } else {
          FillPattern(parts[i], ptrs, {rank, seed});
        }
      });
    }
    for (auto& t : th) t.join();
    for (const auto& s : st) REFIT_RETURN_IF_ERROR(s);
    if (!check) {
      for (int32_t b : bufs) {
        CK(cudaMemcpy(a.base + a.offset[b], ptrs[b], side.buffers[b].byte_size,
                      cudaMemcpyHostToDevice));
      }
    }
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

void WriteResult(const std::string& path, const std::map<std::string, std::string>& kv) {
  std::ofstream f(path);
  for (const auto& [k, v] : kv) f << k << "=" << v << "\n";
}

std::map<std::string, std::string> ReadResult(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

// Waits until every one of `n` members wrote its mark for `round`.
absl::Status Barrier(KvStore* kv, const std::string& tag, int me, int n) {
  REFIT_RETURN_IF_ERROR(kv->Set(absl::StrCat(tag, "/", me), "1"));
  for (int i = 0; i < n; ++i) {
    REFIT_RETURN_IF_ERROR(kv->Get(absl::StrCat(tag, "/", i), absl::Seconds(120)).status());
  }
  return absl::OkStatus();
}

// One member of the pull path (a process or a thread): global rank g of a
// case with c.trainers trainers and one engine. Returns its result.
absl::StatusOr<std::map<std::string, std::string>> PullMember(const Case& c, const Plan& plan,
                                                             int g, const std::string& dir,
                                                             int iters, const std::string& ref_sum,
                                                             int64_t item_kib, bool vmm = false) {
  CK(cudaSetDevice(0));
  const bool trainer = g < c.trainers;
  const Side side = trainer ? Side::kTrainer : Side::kEngine;
  const int rank = trainer ? g : g - c.trainers;
  const SideLayout& full = trainer ? plan.src : plan.dst;
  REFIT_ASSIGN_OR_RETURN(Arena a, Allocate(full, rank, trainer ? 0 : 0xEE, trainer && vmm));
  if (trainer) REFIT_RETURN_IF_ERROR(Pattern(full, rank, a, 1, false));
  CK(cudaDeviceSynchronize());
  const Plan slice = ExtractSlice(plan, side, rank);
  testing::DirKvStore kv(dir);
  PullEngineOptions po;
  po.device = 0;
  po.max_item_bytes = item_kib << 10;
  const absl::Time prep0 = absl::Now();
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<PullEngine> e,
      PullEngine::Create(slice, side, rank,
                         SlicePointers(full, trainer ? slice.src : slice.dst, rank, a),
                         &kv, po, absl::Now() + absl::Seconds(120)));
  const double prep_s = absl::ToDoubleSeconds(absl::Now() - prep0);
  const std::vector<char*> before = a.Pointers();
  double total = 0;
  unsigned long long sum1 = 0;
  std::string check = "PASS";
  const int world = c.trainers + 1;
  for (int round = 1; round <= iters + 1; ++round) {
    if (trainer && round > 1) {
      CK(static_cast<cudaError_t>(cuda::LaunchXorBytes(
          a.base, a.bytes, static_cast<uint8_t>(Key(round) ^ Key(round - 1)), nullptr)));
      CK(cudaDeviceSynchronize());
    }
    REFIT_RETURN_IF_ERROR(Barrier(&kv, absl::StrCat("barrier", round), g, world));
    if (trainer) absl::SleepFor(absl::Milliseconds(20));  // the engine waits first
    const absl::Time t0 = absl::Now();
    REFIT_ASSIGN_OR_RETURN(RunStats s, e->Run(absl::Now() + absl::Seconds(60)));
    const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
    (void)s;
    if (round > 1) total += dt;
    if (!trainer) {
      if (round == 1) {
        REFIT_ASSIGN_OR_RETURN(sum1, Checksum(full, rank, a, 0));
        if (ref_sum.empty()) {  // no host-checked reference: check here
          absl::Status ok = Pattern(full, rank, a, 1, true);
          if (!ok.ok()) check = absl::StrCat("FAIL round 1: ", ok.message());
        } else if (absl::StrCat(sum1) != ref_sum) {
          check = "FAIL round 1: engine checksum differs from the host-checked copy";
        }
      } else {
        REFIT_ASSIGN_OR_RETURN(unsigned long long h, Checksum(full, rank, a, Key(round)));
        if (h != sum1 && check == "PASS") check = absl::StrCat("FAIL round ", round, ": checksum");
      }
    }
  }
  if (a.Pointers() != before) check = "FAIL: buffer addresses changed";
  std::map<std::string, std::string> r;
  // A refit's time is the trainers' (slowest first): from "weights in
  // place" until every engine's copies are done. An engine's own Run also
  // counts its wait for the trainer (which starts 20 ms after it).
  r["ms"] = trainer ? absl::StrCat(total / iters * 1e3) : "0";
  r["check"] = check;
  r["prepare_s"] = absl::StrCat(prep_s);
  r["bytes"] = absl::StrCat(e->bytes());
  r["items"] = absl::StrCat(e->num_items());
  e.reset();
  if (!a.vmm) CK(cudaFree(a.base));
  return r;
}

// Floor, per-tensor and bucketed baselines in one process.
absl::StatusOr<std::map<std::string, std::string>> Baselines(const Case& c, int iters) {
  CK(cudaSetDevice(0));
  std::map<std::string, std::string> r;
  REFIT_ASSIGN_OR_RETURN(Plan hf, CasePlan(c, /*hf_source=*/true));
  REFIT_ASSIGN_OR_RETURN(Arena src, Allocate(hf.src, 0, 0));
  REFIT_ASSIGN_OR_RETURN(Arena dst, Allocate(hf.dst, 0, 0xEE));
  REFIT_RETURN_IF_ERROR(Pattern(hf.src, 0, src, 1, false));
  // Tasks per HF tensor (source buffer), in buffer order.
  std::map<int32_t, std::vector<CopyTask>> by_src;
  for (const Message& m : hf.messages) {
    REFIT_ASSIGN_OR_RETURN(std::vector<CopyTask> t, DirectProgram(hf, m));
    for (const CopyTask& k : t) by_src[k.src_buffer].push_back(k);
  }
  const std::vector<char*> sp = src.Pointers(), dp = dst.Pointers();
  std::vector<cuda::DeviceCopy> all;
  std::vector<std::pair<int64_t, int64_t>> group;  // (first, count) per tensor
  for (auto& [b, tasks] : by_src) {
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> rc, ResolveTasks(tasks, sp, dp, nullptr, nullptr));
    group.emplace_back(all.size(), rc.size());
    for (const ResolvedCopy& x : rc) {
      all.push_back({x.src, x.dst, x.rows, x.row_bytes, x.src_row_stride, x.dst_row_stride});
    }
  }
  cuda::DeviceCopy* dev = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&dev), all.size() * sizeof(cuda::DeviceCopy)));
  CK(cudaMemcpy(dev, all.data(), all.size() * sizeof(cuda::DeviceCopy), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto per_tensor = [&]() -> absl::Status {
    for (const auto& [first, n] : group) {
      CK(static_cast<cudaError_t>(cuda::LaunchCopies(dev + first, static_cast<int>(n), s)));
    }
    CK(cudaStreamSynchronize(s));
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(per_tensor());
  absl::Status ok = Pattern(hf.dst, 0, dst, 1, true);
  r["per_tensor_check"] = ok.ok() ? "PASS" : absl::StrCat("FAIL: ", ok.message());
  // Every other row compares its engine bytes with these (host-checked).
  REFIT_ASSIGN_OR_RETURN(const unsigned long long ref_sum, Checksum(hf.dst, 0, dst, 0));
  r["ref_sum"] = absl::StrCat(ref_sum);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(per_tensor());
  r["per_tensor_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);

  // Bucketed: HF tensors packed into 1 GiB buckets, then copied out.
  int64_t kBucket = 1LL << 30;  // or the largest tensor, if larger
  for (const BufferSpec& b : hf.src.buffers) {
    kBucket = std::max(kBucket, (b.byte_size + 255) / 256 * 256);
  }
  char* bucket = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&bucket), kBucket));
  std::vector<std::vector<int32_t>> buckets(1);
  int64_t used = 0;
  for (auto& [b, tasks] : by_src) {
    const int64_t n = (hf.src.buffers[b].byte_size + 255) / 256 * 256;
    if (used > 0 && used + n > kBucket) {
      buckets.emplace_back();
      used = 0;
    }
    buckets.back().push_back(b);
    used += n;
  }
  // Copy-out tasks per bucket, resolved against the bucket (once).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out_groups(buckets.size());
  std::vector<std::vector<std::pair<int32_t, int64_t>>> packs(buckets.size());
  std::vector<cuda::DeviceCopy> out_all;
  for (size_t k = 0; k < buckets.size(); ++k) {
    int64_t off = 0;
    for (int32_t b : buckets[k]) {
      std::vector<char*> bp(sp.size(), nullptr);
      bp[b] = bucket + off;
      REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> rc,
                             ResolveTasks(by_src[b], bp, dp, nullptr, nullptr));
      out_groups[k].emplace_back(out_all.size(), rc.size());
      for (const ResolvedCopy& x : rc) {
        out_all.push_back({x.src, x.dst, x.rows, x.row_bytes, x.src_row_stride, x.dst_row_stride});
      }
      packs[k].emplace_back(b, off);
      off += (hf.src.buffers[b].byte_size + 255) / 256 * 256;
    }
  }
  cuda::DeviceCopy* out_dev = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&out_dev), out_all.size() * sizeof(cuda::DeviceCopy)));
  CK(cudaMemcpy(out_dev, out_all.data(), out_all.size() * sizeof(cuda::DeviceCopy),
                cudaMemcpyHostToDevice));
  auto bucketed = [&]() -> absl::Status {
    for (size_t k = 0; k < buckets.size(); ++k) {
      for (const auto& [b, off] : packs[k]) {
        CK(cudaMemcpyAsync(bucket + off, sp[b], hf.src.buffers[b].byte_size,
                           cudaMemcpyDeviceToDevice, s));
      }
      CK(cudaStreamSynchronize(s));  // the trainer's bucket is ready
      for (const auto& [first, n] : out_groups[k]) {
        CK(static_cast<cudaError_t>(cuda::LaunchCopies(out_dev + first, static_cast<int>(n), s)));
      }
      CK(cudaStreamSynchronize(s));  // the engine is done with the bucket
    }
    return absl::OkStatus();
  };
  CK(cudaMemset(dst.base, 0xEE, dst.bytes));
  REFIT_RETURN_IF_ERROR(bucketed());
  REFIT_ASSIGN_OR_RETURN(const unsigned long long bsum, Checksum(hf.dst, 0, dst, 0));
  r["bucketed_check"] = bsum == ref_sum ? "PASS" : "FAIL: engine checksum";
  t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(bucketed());
  r["bucketed_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);
  int64_t total = 0;
  for (const Message& m : hf.messages) total += m.bytes;
  CK(cudaFree(bucket));
  CK(cudaFree(out_dev));
  CK(cudaFree(dev));
  CK(cudaFree(src.base));
  CK(cudaFree(dst.base));

  // The floor: one cudaMemcpy of the same bytes.
  char *x = nullptr, *y = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&x), total));
  CK(cudaMalloc(reinterpret_cast<void**>(&y), total));
  CK(cudaMemset(x, 1, total));
  CK(cudaMemcpy(y, x, total, cudaMemcpyDeviceToDevice));
  CK(cudaDeviceSynchronize());
  t0 = absl::Now();
  for (int i = 0; i < iters; ++i) CK(cudaMemcpy(y, x, total, cudaMemcpyDeviceToDevice));
  CK(cudaDeviceSynchronize());
  r["floor_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);
  r["bytes"] = absl::StrCat(total);
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaStreamDestroy(s));
  return r;
}

// One result from the members' (the slowest trainer's time, every
// member's check and error).
absl::StatusOr<std::map<std::string, std::string>> Merge(
    const std::vector<absl::StatusOr<std::map<std::string, std::string>>>& res) {
  std::map<std::string, std::string> out{{"ms", "0"}, {"check", "PASS"}};
  double ms = 0;
  for (const auto& r : res) {
    if (!r.ok()) return r.status();
    double v = 0;
    if (r->count("items") && r->at("items") != "0") out["items"] = r->at("items");
    if (r->count("prepare_s")) out["prepare_s"] = r->at("prepare_s");
    if (absl::SimpleAtod(r->at("ms"), &v)) ms = std::max(ms, v);
    if (r->at("check") != "PASS") out["check"] = r->at("check");
  }
  out["ms"] = absl::StrCat(ms);
  return out;
}

// The pull path with every member a thread of this process.
absl::StatusOr<std::map<std::string, std::string>> PullThreads(const Case& c, const Plan& plan,
                                                              const std::string& dir, int iters,
                                                              const std::string& ref_sum,
                                                              int64_t item_kib) {
  const int world = c.trainers + 1;
  std::vector<absl::StatusOr<std::map<std::string, std::string>>> res(
      world, absl::UnknownError("not run"));
  std::vector<std::thread> th;
  for (int g = 0; g < world; ++g) {
    th.emplace_back([&, g] { res[g] = PullMember(c, plan, g, dir, iters, ref_sum, item_kib); });
  }
  for (auto& t : th) t.join();
  return Merge(res);
}

// Runs `args` of this program as `n` processes (--worker ... INDEX), each
// writing DIR/result.INDEX; bounded by 400 s. The results, or an error.
absl::StatusOr<std::vector<std::map<std::string, std::string>>> Spawn(
    const char* self, const std::vector<std::string>& args, int n, const std::string& dir,
    const std::vector<std::string>& flags) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> a = {self, "--worker"};
      a.insert(a.end(), args.begin(), args.end());
      a.push_back(std::to_string(i));
      a.push_back(dir);
      a.insert(a.end(), flags.begin(), flags.end());
      std::vector<char*> av;
      for (auto& x : a) av.push_back(x.data());
      av.push_back(nullptr);
      execv("/proc/self/exe", av.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  const absl::Time until = absl::Now() + absl::Seconds(400);
  std::vector<bool> done(n, false);
  int left = n;
  while (left > 0 && absl::Now() < until) {
    for (int i = 0; i < n; ++i) {
      int st = 0;
      if (!done[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<std::map<std::string, std::string>> out;
  for (int i = 0; i < n; ++i) {
    if (!done[i]) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      return absl::DeadlineExceededError(absl::StrCat("worker ", i, " timed out"));
    }
    out.push_back(ReadResult(absl::StrCat(dir, "/result.", i)));
    if (out.back().count("error")) return absl::InternalError(out.back()["error"]);
    if (out.back().empty()) return absl::InternalError(absl::StrCat("worker ", i, " crashed"));
  }
  return out;
}

// --worker MODE CASE INDEX DIR (MODE: baselines, threads, member).
int Worker(int argc, char** argv) {
  if (argc < 6) return 2;
  const std::string mode = argv[2], case_name = argv[3], dir = argv[5];
  const int index = std::atoi(argv[4]);
  const int iters = std::atoi(testing::FlagValue(argc, argv, "iters", "5").c_str());
  absl::StatusOr<std::map<std::string, std::string>> r = [&]()
      -> absl::StatusOr<std::map<std::string, std::string>> {
    REFIT_ASSIGN_OR_RETURN(
        Case c, CaseNamed(case_name, testing::FlagValue(argc, argv, "moe_model", "qwen3-30b-a3b")));
    if (mode == "baselines") return Baselines(c, iters);
    REFIT_ASSIGN_OR_RETURN(Plan plan, CasePlan(c, false));
    const std::string ref = testing::FlagValue(argc, argv, "ref_sum", "");
    const int64_t kib = std::atoll(testing::FlagValue(argc, argv, "item_kib", "64").c_str());
    if (mode == "threads") return PullThreads(c, plan, dir + "/kv", iters, ref, kib);
    if (mode == "member-vmm") return PullMember(c, plan, index, dir + "/kv", iters, ref, kib, true);
    return PullMember(c, plan, index, dir + "/kv", iters, ref, kib);
  }();
  const std::string out = absl::StrCat(dir, "/result.", index);
  if (!r.ok()) {
    WriteResult(out, {{"error", std::string(r.status().ToString())}});
    return 1;
  }
  WriteResult(out, *r);
  return 0;
}

double D(const std::map<std::string, std::string>& m, const std::string& k) {
  double v = 0;
  auto it = m.find(k);
  if (it != m.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") return Worker(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::printf("SKIP: no CUDA device\nREFIT_GPU_SKIP\n");
    return 0;
  }
  cudaDeviceProp prop;
  (void)cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU 0: %s, %.1f GiB\n", prop.name, prop.totalGlobalMem / double(1 << 30));
  // The parent uses no more CUDA: workers are forked.
  const std::string cases = testing::FlagValue(argc, argv, "cases", "8b,tp2,moe");
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) flags.push_back(argv[i]);
  bool ok = true;
  std::vector<std::string> table;
  for (absl::string_view cn : absl::StrSplit(cases, ',')) {
    const std::string name(cn);
    absl::StatusOr<Case> c =
        CaseNamed(name, testing::FlagValue(argc, argv, "moe_model", "qwen3-30b-a3b"));
    if (!c.ok()) {
      std::printf("%s\n", c.status().ToString().c_str());
      return 2;
    }
    std::vector<std::string> case_flags = flags;
    auto run = [&](const std::string& mode, int n)
        -> absl::StatusOr<std::vector<std::map<std::string, std::string>>> {
      char tmpl[] = "/tmp/colocated_bench.XXXXXX";
      const std::string dir = mkdtemp(tmpl);
      (void)system(absl::StrCat("mkdir -p ", dir, "/kv").c_str());
      std::vector<std::string> args = {mode, name};
      absl::StatusOr<std::vector<std::map<std::string, std::string>>> r =
          Spawn(argv[0], args, n, dir, case_flags);
      (void)system(absl::StrCat("rm -rf ", dir).c_str());
      return r;
    };
    std::printf("== %s: %s, %s -> %s\n", name.c_str(), c->model.c_str(), c->trainer.c_str(),
                c->engine.c_str());
    std::fflush(stdout);
    auto base = run("baselines", 1);
    if (!base.ok()) {
      std::printf("%s baselines: %s\n", name.c_str(), base.status().ToString().c_str());
      ok = false;
      continue;
    }
    const auto& b = (*base)[0];
    case_flags.push_back(absl::StrCat("--ref_sum=", b.at("ref_sum")));
    const double floor = D(b, "floor_ms");
    auto row = [&](const std::string& what, double ms, const std::string& check,
                   const std::string& extra) {
      table.push_back(absl::StrFormat("%-4s %-11s %9.2f ms %6.3fx  %-5s %s", name, what, ms,
                                      floor > 0 ? ms / floor : 0, check.substr(0, 5), extra));
      std::printf("%s\n", table.back().c_str());
      std::fflush(stdout);
      if (check != "PASS" && check != "-") {
        ok = false;
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), check.c_str());
      }
    };
    row("floor", floor, "-",
        absl::StrFormat("%.2f GB, %.0f GB/s", D(b, "bytes") / 1e9,
                        D(b, "bytes") / 1e9 / (floor / 1e3)));
    row("per-tensor", D(b, "per_tensor_ms"), b.at("per_tensor_check"),
        "one copy kernel per HF tensor, in process (engine bytes host-checked)");
    row("bucketed", D(b, "bucketed_ms"), b.at("bucketed_check"),
        "1 GiB buckets, pack + copy out, in process");
    auto pull_row = [&](const std::string& what, const std::string& mode, int n,
                        const std::string& extra) {
      auto res = run(mode, n);
      if (!res.ok()) {
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), res.status().ToString().c_str());
        ok = false;
        return;
      }
      absl::StatusOr<std::map<std::string, std::string>> m = Merge({res->begin(), res->end()});
      if (!m.ok()) {
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), m.status().ToString().c_str());
        ok = false;
        return;
      }
      row(what, D(*m, "ms"), m->at("check"),
          absl::StrFormat("%s, %s work items, prepare %.2f s", extra,
                          m->count("items") ? m->at("items") : "?", D(*m, "prepare_s")));
    };
    pull_row("pull-procs", "member", c->trainers + 1,
             absl::StrCat(c->trainers + 1, " processes"));
    if (name == "8b") {
      pull_row("pull-vmm", "member-vmm", 2,
               "2 processes, trainer memory in 20 MiB cuMem chunks (expandable_segments)");
    }
    if (name != "moe") {
      pull_row("pull-thrds", "threads", 1, absl::StrCat(c->trainers + 1, " threads of one process"));
    }
  }
  std::printf("\ncase what             time   vs floor check details\n");
  for (const std::string& l : table) std::printf("%s\n", l.c_str());
  std::printf("%s\n", ok ? "ALL PASS" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }
