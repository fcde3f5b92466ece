// delta_bench: delta rounds of the refit GPU member path next to dense
// rounds, trainer GPU 0 -> engine GPU 1 over NCCL, on a model's tensors
// (default Qwen3-8B: 8.19 B parameters, 16.4 GB in BF16; synthetic
// normal(0, 0.02) weights), one process driving both GPUs, one thread per
// member.
//
// Both members are built as DataPlaneMember builds them
// (exec/member_runner.h): the delta round is MakeDeltaMemberRunner's
// DeltaRunner (NCCL transport, CUDA copier, GPU wave ops: per wave one
// count pass, one scan, one gather, headers then payloads, the next wave's
// encode while this one sends; the engine applies in place), verified as
// delta rounds are; the dense round is MakeMemberRunner's executor into a
// second set of engine buffers. The plan is the planner's for fsdp:dp=1 ->
// vllm:tp=1 (BF16 engine) and vllm:tp=1,quant=fp8 (the trainer quantizes to
// e4m3 with 128x128 block scales each round; deltas compare the codes and
// scales). After every row the two engine copies are compared byte for
// byte on GPU 1 and the verified round's digests must agree.
//
// Rows: 0.5%, 2%, 5%, 20% of the BF16 elements changed at random positions,
// and one AdamW step at lr 1e-6. Columns: engine words changed, wire bytes
// over dense, the delta round less the time its members spent on digests
// outside the overlap (the slower member), the dense round, their ratio,
// the verified round as a user sees it (digests included: delta rounds
// are always verified) and its ratio to the dense round, raw NCCL of the
// dense bytes in one send, the encoder (count + gather of every message in
// one batch, current and snapshot read: GB/s read) next to the read floor
// (a compare that writes nothing) and a device copy (GB/s read), and the
// digest time outside the overlap (the slower member).
// Prints the table last; exit 1 if any byte or digest differs.
//
//   delta_bench [--rows=0.5,2,5,20,adamw] [--engines=bf16,fp8] [--model=qwen3-8b]
//               KNOBS   (the delta path's options: bench/delta_bench_knobs.h,
//               kKnobsUsage; each described in docs/delta.md)
//   (needs 2 GPUs; exits 0 with SKIP otherwise)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/delta_bench_kernels.h"
#include "bench/delta_bench_knobs.h"
#include "testing/read_floor_kernels.h"
#include "exec/cuda/cuda_copier.h"
#include "exec/transport/cuda/cuda_lanes.h"
#include "exec/transport/cuda/nccl_transport.h"
#include "exec/delta/cuda/gpu_wave_ops.h"
#include "exec/delta/digest_term.h"
#include "exec/transport/kv_store.h"
#include "exec/member_runner.h"
#include "mapping/mapping.h"
#include "plan/planner.h"

namespace refit {
namespace {

#define CU(x) Check(static_cast<int>(x), #x, __LINE__)

void Check(int e, const char* what, int line) {
  if (e != 0) {
    std::fprintf(stderr, "delta_bench: %s (line %d): %s\n", what, line,
                 cudaGetErrorString(static_cast<cudaError_t>(e)));
    std::exit(1);
  }
}
template <typename T>
T Ok(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "delta_bench: %s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*v);
}
void Ok(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "delta_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


// Per batch, in ms since each member's round began: the trainer's count
// kernel, when its thread had the count and posted the group; when the
// engine had the headers, posted the payloads' receive and the apply.
void PrintTrace(const DeltaRoundStats& t, const DeltaRoundStats& e) {
  for (size_t k = 0; k < t.batch_times.size(); ++k) {
    const DeltaBatchTimes& a = t.batch_times[k];
    const DeltaBatchTimes b = k < e.batch_times.size() ? e.batch_times[k] : DeltaBatchTimes();
    const std::pair<double, double> c =
        k < t.count_windows.size() ? t.count_windows[k] : std::pair<double, double>();
    std::printf("    batch %2zu lane %d: count %6.2f-%6.2f, trainer had it %6.2f, posted %6.2f; "
                "engine headers %6.2f, posted %6.2f, applied %6.2f ms\n",
                k, a.lane, c.first * 1e3, c.second * 1e3, a.ready * 1e3, a.posted * 1e3,
                b.ready * 1e3, b.posted * 1e3, b.applied * 1e3);
  }
}

DataPlaneParts NcclParts(int device, const char* prefix, Knobs knobs = {}) {
  DataPlaneParts p;
  p.transport = [device, prefix, knobs](KvStore* store, int32_t rank, int32_t world,
                                        int32_t lanes)
      -> absl::StatusOr<std::unique_ptr<Transport>> {
    NcclTransportOptions o;
    o.connect_timeout = absl::Seconds(knobs.deadline_s);
    o.num_lanes = lanes;
    o.device = device;
    o.key_prefix = prefix;
    auto t = NcclTransport::Create(store, rank, world, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  };
  p.copier = [](Transport* t) { return MakeCudaCopier(static_cast<NcclTransport*>(t)); };
  p.delta_ops = [device, knobs](Transport* t) {
    GpuWaveOpsOptions o;
    o.device = device;
    o.snapshot = knobs.snapshot;
    return MakeGpuWaveOps(static_cast<NcclTransport*>(t), o);
  };
  return p;
}

// One stream as CudaLanes, for the encoder's own measurement.
class OneLane : public CudaLanes {
 public:
  OneLane() { CU(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~OneLane() override { cudaStreamDestroy(s_); }
  int32_t num_lanes() const override { return 1; }
  void* stream(int32_t lane) const override { return lane == 0 ? s_ : nullptr; }
  absl::Status CheckCancelled() override { return absl::OkStatus(); }

 private:
  cudaStream_t s_ = nullptr;
};

struct Row {
  std::string engine, change;
  double changed = 0, wire = 0, delta_s = 0, dense_s = 0, raw_s = 0;
  double encode_gbps = 0, count_gbps = 0, copy_gbps = 0, read_gbps = 0;
  double digest_s = 0, digest_gb = 0, commit_s = 0, verified_s = 0;
  bool ok = false;
};

struct Buffers {
  std::vector<char*> ptrs;
  std::vector<int64_t> bytes;
};

Buffers Allocate(const SideLayout& side, int device) {
  CU(cudaSetDevice(device));
  Buffers b;
  for (const auto& buf : side.buffers) {
    char* p = nullptr;
    if (buf.rank == 0 && !buf.scratch) {
      CU(cudaMalloc(reinterpret_cast<void**>(&p), buf.byte_size + 16));
      CU(cudaMemset(p, 0, buf.byte_size));
    }
    b.ptrs.push_back(p);
    b.bytes.push_back(p != nullptr ? buf.byte_size : 0);
  }
  return b;
}

void Free(Buffers* b, int device) {
  CU(cudaSetDevice(device));
  for (char* p : b->ptrs) {
    if (p != nullptr) cudaFree(p);
  }
}

class Bench {
 public:
  Bench(const std::string& model, bool fp8, Knobs knobs) : fp8_(fp8), knobs_(knobs) {
    ModelConfig m = Ok(LoadModelConfig(model), "model");
    MappedSide src = Ok(BuildTrainerLayout(m, Ok(ParseTrainerSpec("fsdp:dp=1"), "trainer")),
                        "trainer layout");
    MappedSide dst = Ok(BuildEngineLayout(m, Ok(ParseEngineSpec(fp8 ? "vllm:tp=1,quant=fp8"
                                                                   : "vllm:tp=1"),
                                                 "engine")),
                        "engine layout");
    PlannerOptions po;
    po.num_lanes = knobs.lanes;
    po.choose_lanes = false;
    po.staging_budget_bytes = knobs.staging_bytes;
    plan_ = Ok(BuildPlan(src.layout, dst.layout, po), "plan");
    for (const Message& msg : plan_.messages) dense_bytes_ += msg.bytes;
    trainer_ = Allocate(plan_.src, 0);
    delta_engine_ = Allocate(plan_.dst, 1);
    dense_engine_ = Allocate(plan_.dst, 1);
    CU(cudaSetDevice(0));
    for (size_t b = 0; b < trainer_.ptrs.size(); ++b) {
      if (trainer_.ptrs[b] == nullptr) continue;
      CU(bench::LaunchFillWeights(reinterpret_cast<uint16_t*>(trainer_.ptrs[b]),
                                  trainer_.bytes[b] / 2, b + 1, nullptr));
    }
    CU(cudaDeviceSynchronize());
    // The members, built as DataPlaneMember builds them.
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([this, g, knobs] {
        CU(cudaSetDevice(g));
        MemberSlice ms;
        ms.plan = &plan_;
        ms.side = g == 0 ? Side::kTrainer : Side::kEngine;
        ms.rank = 0;
        ms.global_rank = g;
        ms.global_world = 2;
        ms.num_lanes = plan_.options.num_lanes;
        ms.buffers = g == 0 ? trainer_.ptrs : delta_engine_.ptrs;
        DataPlaneParts delta_parts = NcclParts(g, "delta", knobs);
        delta_parts.delta = true;
        if (g == 0) delta_parts.delta_options.snapshot = &snapshot_;
        delta_[g] = Ok(MakeDeltaMemberRunner(ms, delta_parts, &delta_store_), "delta member");
        ms.buffers = g == 0 ? trainer_.ptrs : dense_engine_.ptrs;
        dense_[g] = Ok(MakeMemberRunner(ms, NcclParts(g, "dense", knobs), &dense_store_,
                                        Deadline()),
                       "dense member");
      });
    }
    for (auto& t : threads) t.join();
  }

  ~Bench() {
    for (int g = 0; g < 2; ++g) {
      CU(cudaSetDevice(g));
      delta_[g].reset();
      dense_[g].reset();
    }
    Free(&trainer_, 0);
    Free(&delta_engine_, 1);
    Free(&dense_engine_, 1);
  }

  // One delta round (verified); returns the slower member's seconds less
  // its digests, *digest_s the slower member's digest seconds, *verified_s
  // the slower member's whole round, digests included (the round as the
  // user sees it). Commits.
  double DeltaRound(bool delta, double* digest_s, DeltaRoundStats* trainer_stats,
                    DeltaRoundStats* engine_stats = nullptr, double* verified_s = nullptr) {
    std::vector<EngineDeltaMode> modes = {delta ? EngineDeltaMode{false, version_}
                                                : EngineDeltaMode{}};
    Warm();
    double secs[2] = {0, 0}, dig[2] = {0, 0}, whole[2] = {0, 0};
    DigestSums sums[2];
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([&, g] {
        CU(cudaSetDevice(g));
        delta_[g]->Begin({version_ + 1, DeltaBases(modes), true});
        RunStats s = Ok(delta_[g]->Run(Deadline()), "delta round");
        sums[g] = s.digests;
        dig[g] = delta_[g]->delta_stats().digest_seconds;
        whole[g] = s.seconds;
        secs[g] = s.seconds - dig[g];
      });
    }
    for (auto& t : threads) t.join();
    digests_ok_ = CompareDigests(plan_, sums[0], sums[1]).ok();
    *trainer_stats = delta_[0]->delta_stats();
    if (engine_stats != nullptr) *engine_stats = delta_[1]->delta_stats();
    const double t_commit = Now();
    ++version_;
    delta_[0]->Finish(RoundOutcome::kCommitted);
    commit_s_ = Now() - t_commit;
    *digest_s = std::max(dig[0], dig[1]);
    if (verified_s != nullptr) *verified_s = std::max(whole[0], whole[1]);
    return std::max(secs[0], secs[1]);
  }

  // Keeps the trainer GPU reading its largest buffer for knobs_.warm_ms.
  void Warm() {
    if (knobs_.warm_ms <= 0) return;
    CU(cudaSetDevice(0));
    size_t big = 0;
    for (size_t b = 0; b < trainer_.bytes.size(); ++b) {
      if (trainer_.ptrs[b] != nullptr && trainer_.bytes[b] > trainer_.bytes[big]) big = b;
    }
    unsigned long long* sink = nullptr;
    CU(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(*sink)));
    const auto* p = reinterpret_cast<const uint8_t*>(trainer_.ptrs[big]);
    const int64_t n = trainer_.bytes[big] / 16 * 16;
    for (const double t0 = Now(); (Now() - t0) * 1e3 < knobs_.warm_ms;) {
      CU(testing::LaunchCompareChunks(p, p, n, sink, nullptr));
      CU(cudaDeviceSynchronize());
    }
    cudaFree(sink);
  }

  double DenseRound() {
    double secs[2] = {0, 0};
    std::vector<std::thread> threads;
    for (int g = 0; g < 2; ++g) {
      threads.emplace_back([&, g] {
        CU(cudaSetDevice(g));
        secs[g] = Ok(dense_[g]->Run(Deadline()), "dense round").seconds;
      });
    }
    for (auto& t : threads) t.join();
    return std::max(secs[0], secs[1]);
  }

  void Change(const std::string& how, double fraction, uint64_t seed) {
    CU(cudaSetDevice(0));
    for (size_t b = 0; b < trainer_.ptrs.size(); ++b) {
      if (trainer_.ptrs[b] == nullptr) continue;
      auto* w = reinterpret_cast<uint16_t*>(trainer_.ptrs[b]);
      const int64_t n = trainer_.bytes[b] / 2;
      CU(how == "adamw" ? bench::LaunchAdamStep(w, n, 1e-6f, seed + b, nullptr)
                        : bench::LaunchRandomChange(w, n, fraction, seed + b, nullptr));
    }
    CU(cudaDeviceSynchronize());
  }

  // Engine copies equal, byte for byte, and the digests agreed.
  bool BytesEqual() {
    CU(cudaSetDevice(1));
    unsigned long long* diff = nullptr;
    CU(cudaMalloc(reinterpret_cast<void**>(&diff), sizeof(*diff)));
    CU(cudaMemset(diff, 0, sizeof(*diff)));
    for (size_t b = 0; b < delta_engine_.ptrs.size(); ++b) {
      if (delta_engine_.ptrs[b] == nullptr) continue;
      CU(bench::LaunchCountDiff(reinterpret_cast<const uint8_t*>(delta_engine_.ptrs[b]),
                                reinterpret_cast<const uint8_t*>(dense_engine_.ptrs[b]),
                                delta_engine_.bytes[b], diff, nullptr));
    }
    unsigned long long d = 0;
    CU(cudaMemcpy(&d, diff, sizeof(d), cudaMemcpyDeviceToHost));
    cudaFree(diff);
    if (d != 0) std::fprintf(stderr, "delta_bench: %llu engine bytes differ\n", d);
    if (!digests_ok_) std::fprintf(stderr, "delta_bench: the verified round's digests differ\n");
    return d == 0 && digests_ok_;
  }

  // The encoder on the snapshot's regions against a copy with `fraction`
  // of its 2-byte words changed, every message in one batch (GB/s read:
  // current and snapshot), and a device copy (GB/s read; it writes as
  // many bytes as it reads).
  void Encoder(double fraction, double* encode_gbps, double* count_gbps, double* copy_gbps,
               double* read_gbps) {
    CU(cudaSetDevice(0));
    OneLane lane;
    std::unique_ptr<DeltaWaveOps> ops = Ok(MakeGpuWaveOps(&lane), "encoder ops");
    const int64_t total = snapshot_.bytes();
    int64_t aligned = 0;
    for (const auto& [key, r] : snapshot_.messages) aligned += (r.bytes + 15) / 16 * 16;
    char *cur = nullptr, *out = nullptr;
    CU(cudaMalloc(reinterpret_cast<void**>(&cur), aligned + 16));
    std::vector<EncodeItem> items;
    // As a verified round's count: each message digested in the same read.
    std::vector<DigestItem> runs;
    runs.reserve(snapshot_.messages.size());
    int64_t at = 0;
    for (const auto& [key, r] : snapshot_.messages) {
      CU(cudaMemcpy(cur + at, r.data.get(), r.bytes, cudaMemcpyDefault));
      const int word = r.bytes % 2 == 0 ? 2 : 1;
      runs.push_back({cur + at, r.bytes, word, PositionKey(static_cast<int64_t>(runs.size()), 0),
                      0});
      items.push_back({cur + at, r.data.get(), r.bytes, word});
      items.back().digest = absl::MakeConstSpan(&runs.back(), 1);
      at += (r.bytes + 15) / 16 * 16;
    }
    CU(bench::LaunchRandomChange(reinterpret_cast<uint16_t*>(cur), aligned / 2, fraction, 77,
                                 nullptr));
    CU(cudaDeviceSynchronize());
    auto stream = static_cast<cudaStream_t>(lane.stream(0));
    char* hdr = nullptr;
    CU(cudaMalloc(reinterpret_cast<void**>(&hdr), items.size() * 32));
    double best = 1e9, best_count = 1e9;
    for (int iter = 0; iter < 3; ++iter) {
      Ok(ops->StartDigests(1), "digests");
      const double t0 = Now();
      std::vector<int64_t> c = Ok(ops->Count(0, items, absl::Now() + absl::Seconds(30)), "count");
      best_count = std::min(best_count, Now() - t0);
      std::vector<DeltaHeader> h(items.size());
      std::vector<char*> outs(items.size());
      int64_t need = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        const int64_t n = items[i].bytes / items[i].word_bytes;
        const DeltaEncoding e = ChooseEncoding(items[i].word_bytes, n, c[i]);
        h[i].encoding = static_cast<uint8_t>(e);
        h[i].word_bytes = static_cast<uint8_t>(items[i].word_bytes);
        h[i].num_words = n;
        h[i].num_changed = e == DeltaEncoding::kDense ? n : c[i];
        h[i].payload_bytes = DeltaPayloadBytes(e, items[i].word_bytes, n, h[i].num_changed);
        need += (h[i].payload_bytes + 15) / 16 * 16;
      }
      if (out == nullptr) CU(cudaMalloc(reinterpret_cast<void**>(&out), need + 16));
      int64_t o = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        outs[i] = h[i].encoding == 0 ? nullptr : out + o;
        if (h[i].encoding != 0) o += (h[i].payload_bytes + 15) / 16 * 16;
      }
      Ok(ops->Encode(0, items, h, outs, hdr, absl::Now() + absl::Seconds(30)), "encode");
      CU(cudaStreamSynchronize(stream));
      best = std::min(best, Now() - t0);
    }
    *encode_gbps = 2.0 * total / best / 1e9;
    *count_gbps = 2.0 * total / best_count / 1e9;
    // A device copy of half the bytes onto the other half.
    const int64_t half = aligned / 2 / 256 * 256;
    double copy = 1e9;
    for (int iter = 0; iter < 3; ++iter) {
      const double t0 = Now();
      CU(cudaMemcpyAsync(cur + half, cur, half, cudaMemcpyDeviceToDevice, stream));
      CU(cudaStreamSynchronize(stream));
      copy = std::min(copy, Now() - t0);
    }
    *copy_gbps = half / copy / 1e9;
    // A compare that reads current and snapshot and writes nothing.
    unsigned long long* diff = nullptr;
    CU(cudaMalloc(reinterpret_cast<void**>(&diff), sizeof(*diff)));
    const int64_t cmp = aligned / 2 / 16 * 16;
    double rd = 1e9;
    for (int iter = 0; iter < 3; ++iter) {
      const double t0 = Now();
      CU(testing::LaunchCompareChunks(reinterpret_cast<const uint8_t*>(cur),
                                    reinterpret_cast<const uint8_t*>(cur + cmp), cmp, diff,
                                    stream));
      CU(cudaStreamSynchronize(stream));
      rd = std::min(rd, Now() - t0);
    }
    *read_gbps = 2.0 * cmp / rd / 1e9;
    cudaFree(diff);
    ops.reset();
    cudaFree(cur);
    cudaFree(out);
    cudaFree(hdr);
  }

  // Raw NCCL: the dense bytes as one send, GPU 0 -> GPU 1.
  double RawNccl(ncclComm_t* comms) {
    char *a = nullptr, *b = nullptr;
    cudaStream_t s[2];
    for (int g = 0; g < 2; ++g) {
      CU(cudaSetDevice(g));
      CU(cudaMalloc(reinterpret_cast<void**>(g == 0 ? &a : &b), dense_bytes_));
      CU(cudaStreamCreateWithFlags(&s[g], cudaStreamNonBlocking));
    }
    double best = 1e9;
    for (int iter = 0; iter < 3; ++iter) {
      const double t0 = Now();
      ncclGroupStart();
      ncclSend(a, dense_bytes_, ncclUint8, 1, comms[0], s[0]);
      ncclRecv(b, dense_bytes_, ncclUint8, 0, comms[1], s[1]);
      if (ncclGroupEnd() != ncclSuccess) std::exit(1);
      for (int g = 0; g < 2; ++g) {
        CU(cudaSetDevice(g));
        CU(cudaStreamSynchronize(s[g]));
      }
      best = std::min(best, Now() - t0);
    }
    for (int g = 0; g < 2; ++g) {
      CU(cudaSetDevice(g));
      cudaFree(g == 0 ? a : b);
      cudaStreamDestroy(s[g]);
    }
    return best;
  }

  int64_t dense_bytes() const { return dense_bytes_; }
  // The last Commit's time: the snapshot brought up to date (outside the
  // round: the trainer's next step runs meanwhile).
  double commit_seconds() const { return commit_s_; }
  int64_t snapshot_bytes() const { return snapshot_.bytes(); }
  size_t messages() const { return plan_.messages.size(); }
  size_t waves() const { return plan_.waves.size(); }

 private:
  bool fp8_;
  Knobs knobs_;
  // Each member's set-up and each round must end by then.
  absl::Time Deadline() const { return absl::Now() + absl::Seconds(knobs_.deadline_s); }
  Plan plan_;
  int64_t dense_bytes_ = 0;
  Buffers trainer_, delta_engine_, dense_engine_;
  InMemoryKvStore delta_store_, dense_store_;
  DeltaSnapshot snapshot_;
  std::unique_ptr<DeltaRunner> delta_[2];
  std::unique_ptr<RoundRunner> dense_[2];
  int64_t version_ = 0;
  bool digests_ok_ = true;
  double commit_s_ = 0;
};

int Main(int argc, char** argv) {
  std::string rows_flag = "0.5,2,5,20,adamw", engines_flag = "bf16,fp8", model = "qwen3-8b";
  Knobs knobs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--rows=", 0) == 0) rows_flag = a.substr(7);
    else if (a.rfind("--engines=", 0) == 0) engines_flag = a.substr(10);
    else if (a.rfind("--model=", 0) == 0) model = a.substr(8);
    else if (ParseKnob(a, &knobs)) continue;
    else {
      std::fprintf(stderr, "usage: delta_bench [--rows=0.5,2,5,20,adamw] [--engines=bf16,fp8] "
                           "[--model=qwen3-8b] %s\n", kKnobsUsage);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("SKIP delta_bench: needs 2 CUDA devices, found %d (REFIT_GPU_SKIP)\n", n);
    return 0;
  }
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  std::printf("delta_bench: %s x2, NCCL %d, model %s, %s\n", prop.name, nccl_version,
              model.c_str(), DescribeKnobs(knobs).c_str());
  if (knobs.warm_ms > 0) {
    std::printf("the trainer GPU reads its weights for %.0f ms before each delta round\n",
                knobs.warm_ms);
  }
  int devs[2] = {0, 1};
  ncclComm_t comms[2];
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) return 1;
  std::vector<Row> rows;
  bool all_ok = true;
  for (const std::string& engine : std::vector<std::string>(absl::StrSplit(engines_flag, ','))) {
    const double t_setup = Now();
    Bench b(model, engine == "fp8", knobs);
    double digest = 0;
    DeltaRoundStats st;
    // Version 1, dense everywhere (the snapshot is made at its commit),
    // then warm-up delta rounds: 20% changed (the encodings' buffers reach
    // their size, as after an RL job's first steps), then none.
    b.DeltaRound(false, &digest, &st);
    b.DenseRound();
    bool ok = b.BytesEqual();
    b.Change("random", 0.2, 7);
    b.DeltaRound(true, &digest, &st);
    b.DeltaRound(true, &digest, &st);
    b.DenseRound();
    ok = b.BytesEqual() && ok;
    const double raw = b.RawNccl(comms);
    std::printf("%s engine: %zu messages in %zu waves, %lld bytes per round, snapshot %lld "
                "bytes, set up in %.1f s, first rounds %s\n",
                engine.c_str(), b.messages(), b.waves(),
                static_cast<long long>(b.dense_bytes()),
                static_cast<long long>(b.snapshot_bytes()), Now() - t_setup,
                ok ? "bytes ok" : "BYTES WRONG");
    all_ok = all_ok && ok;
    uint64_t seed = 100;
    for (const std::string& what : std::vector<std::string>(absl::StrSplit(rows_flag, ','))) {
      Row r;
      r.engine = engine;
      double pct = 0;
      const bool adamw = what == "adamw";
      if (!adamw && !absl::SimpleAtod(what, &pct)) {
        std::fprintf(stderr, "delta_bench: bad row %s\n", what.c_str());
        return 2;
      }
      r.change = adamw ? "AdamW lr 1e-6" : absl::StrFormat("random %.1f%%", pct);
      b.Change(adamw ? "adamw" : "random", pct / 100, ++seed * 1000);
      DeltaRoundStats est;
      r.delta_s = b.DeltaRound(true, &r.digest_s, &st, &est, &r.verified_s);
      r.commit_s = b.commit_seconds();
      r.changed = static_cast<double>(st.changed_words) / std::max<int64_t>(1, st.words);
      r.wire = static_cast<double>(st.wire_bytes) / std::max<int64_t>(1, st.dense_bytes);
      r.digest_gb = 2.0 * b.dense_bytes() / 1e9;
      r.dense_s = b.DenseRound();
      r.ok = b.BytesEqual();
      r.raw_s = raw;
      b.Encoder(adamw ? std::max(r.changed, 1e-4) : pct / 100, &r.encode_gbps, &r.count_gbps,
                &r.copy_gbps, &r.read_gbps);
      all_ok = all_ok && r.ok;
      std::printf("%s %s: changed %.4f wire %.4f delta %.4f s dense %.4f s digest %.4f s "
                  "verified round %.4f s %s\n",
                  r.engine.c_str(), r.change.c_str(), r.changed, r.wire, r.delta_s, r.dense_s,
                  r.digest_s, r.verified_s, r.ok ? "bytes ok" : "BYTES WRONG");
      std::printf("  trainer: %lld batches, %lld groups, %lld payload transfers for %lld messages; "
                  "quantize %.4f s, count wait %.4f s, "
                  "encode %.4f s, posting %.4f s, drain %.4f s; GPU: %lld counts %.4f s over %.4f s, "
                  "encodes %.4f s; engine: %lld groups; headers "
                  "wait %.4f s, apply %.4f s, drain %.4f s\n",
                  static_cast<long long>(st.batches), static_cast<long long>(st.groups),
                  static_cast<long long>(st.transfers), static_cast<long long>(st.messages),
                  st.convert_seconds, st.count_wait_seconds, st.encode_seconds,
                  st.transport_wait_seconds, st.drain_seconds,
                  static_cast<long long>(st.counts()), st.count_gpu_seconds(),
                  st.count_span_gpu_seconds(), st.encode_gpu_seconds,
                  static_cast<long long>(est.groups), est.transport_wait_seconds,
                  est.apply_seconds, est.drain_seconds);
      if (knobs.trace) PrintTrace(st, est);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  std::printf(
      "\ndelta_bench: %s synthetic weights, fsdp:dp=1 trainer GPU 0 -> vllm:tp=1 engine GPU 1 over "
      "NCCL (%s)\n"
      "changed = engine-format words changed (bf16: 2-byte words; fp8: bytes of codes and scales); wire = "
      "delta bytes / dense bytes;\ndelta_s = the delta round less its digests, dense_s = the "
      "executor's dense round (slower member each);\nencode/copy = GB/s read (encoder: current "
      "+ snapshot, one batch, digesting as a verified round's count does; copy: the bytes once);\nenc/HBM = the encoder's read rate over the "
      "copy's bytes moved (read + write: the HBM rate); cnt/HBM = the same of its count pass alone (the kernel that reads both, with the totals' way to the host); digest_s = the time spent on the verified round's digests "
      "outside the overlap (slower member, all of its bytes);\nverified_s = the delta round with its digests, as a verified round takes (slower member); v/dense = verified_s / dense_s;\nread = a compare of two buffers that writes nothing (GB/s read: the encoder's floor);\ncommit_s = the trainer's snapshot update after the commit (outside the round);\nbytes = the delta engine equals the dense engine byte "
      "for byte and the digests agreed\n\n",
      model.c_str(), prop.name);
  std::printf("%-6s %-15s %8s %7s %9s %9s %7s %10s %7s %9s %9s %9s %9s %7s %7s %9s %9s %5s\n",
              "engine", "change", "changed", "wire", "delta_s", "dense_s", "ratio", "verified_s",
              "v/dense", "raw_nccl",
              "enc_GB/s", "read_GB/s", "copy_GB/s", "enc/HBM", "cnt/HBM", "digest_s", "commit_s",
              "bytes");
  for (const Row& r : rows) {
    std::printf(
        "%-6s %-15s %8.4f %7.4f %9.4f %9.4f %7.3f %10.4f %7.3f %9.4f %9.0f %9.0f %9.0f %7.2f "
        "%7.2f %9.4f %9.4f %5s\n",
        r.engine.c_str(), r.change.c_str(), r.changed, r.wire, r.delta_s, r.dense_s,
        r.delta_s / r.dense_s, r.verified_s, r.verified_s / r.dense_s, r.raw_s, r.encode_gbps,
        r.read_gbps, r.copy_gbps, r.encode_gbps / (2 * r.copy_gbps),
        r.count_gbps / (2 * r.copy_gbps), r.digest_s, r.commit_s, r.ok ? "ok" : "WRONG");
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }
