// The two-GPU copy table (see colocated_gpus_copies.h).
#include "bench/colocated_gpus_copies.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/pull/cuda/copy_engine.h"
#include "exec/pull/cuda/pull_kernels.h"

namespace refit::bench {
namespace {

constexpr int kGpus = 2;
constexpr int kMaxStreams = 8;

#define NK(x)                                                                        \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      return absl::InternalError(absl::StrCat(#x, ": ", ncclGetErrorString(r_)));    \
    }                                                                                \
  } while (0)

// One GPU's side of the table: trainer rank g's and engine rank g's arenas,
// the engine's copies and their pull items on the device.
struct Gpu {
  int g = 0;
  cudaStream_t a = nullptr;
  std::vector<void*> b;  // kMaxStreams streams for the copy engines
  Arena trainer, engine;
  EngineCopies copies;
  std::vector<ResolvedCopy> peer_joined;      // as the pull runner joins them
  std::vector<ResolvedCopy> peer_contiguous;  // contiguous runs joined only
  // peer_joined's strided copies with rows under 64 KiB, and the others
  std::vector<ResolvedCopy> peer_runs, peer_strided;
  int64_t runs_bytes = 0, strided_bytes = 0;
  // local, peer, all, peer in 256 KiB items, strided peer
  cuda::PullItem* items[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  int64_t n[5] = {0, 0, 0, 0, 0};
};

absl::Status Upload(const std::vector<ResolvedCopy>& copies, cuda::PullItem** items,
                    int64_t* n, int64_t item_bytes = 64 << 10) {
  const std::vector<cuda::PullItem> v = cuda::SplitPullItems(copies, item_bytes);
  *n = static_cast<int64_t>(v.size());
  CK(cudaMalloc(reinterpret_cast<void**>(items), std::max<size_t>(1, v.size()) * sizeof(v[0])));
  CK(cudaMemcpy(*items, v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

// Runs `work(gpu)` on both GPUs at once (a thread each, every GPU's work
// synchronized in its thread); the mean wall time in ms of `iters` runs
// after a warm-up.
absl::StatusOr<double> Both(std::vector<Gpu>& gpus, int iters,
                            const std::function<absl::Status(Gpu&)>& work) {
  auto once = [&]() -> absl::Status {
    std::vector<absl::Status> st(gpus.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < gpus.size(); ++i) {
      th.emplace_back([&, i] {
        st[i] = [&]() -> absl::Status {
          CK(cudaSetDevice(gpus[i].g));
          REFIT_RETURN_IF_ERROR(work(gpus[i]));
          CK(cudaStreamSynchronize(gpus[i].a));
          for (void* b : gpus[i].b) CK(cudaStreamSynchronize(static_cast<cudaStream_t>(b)));
          return absl::OkStatus();
        }();
      });
    }
    for (auto& t : th) t.join();
    for (const absl::Status& s : st) REFIT_RETURN_IF_ERROR(s);
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(once());
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(once());
  return absl::ToDoubleMilliseconds(absl::Now() - t0) / iters;
}

absl::Status Pull(Gpu& x, int which, cudaStream_t s) {
  CK(static_cast<cudaError_t>(cuda::LaunchPull(x.items[which], x.n[which], s)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> CopiesTable(
    const GpusCase& c, const std::string& model, int iters, int streams,
    std::vector<std::string>* table) {
  streams = std::max(1, std::min(streams, kMaxStreams));
  REFIT_ASSIGN_OR_RETURN(Plan plan, GpusCasePlan(c, model));
  std::vector<Gpu> gpus(kGpus);
  std::vector<Arena> trainers(kGpus);
  for (int g = 0; g < kGpus; ++g) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < kGpus; ++p) {
      if (p == g) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      (void)cudaGetLastError();
    }
    gpus[g].g = g;
    CK(cudaStreamCreateWithFlags(&gpus[g].a, cudaStreamNonBlocking));
    for (int i = 0; i < kMaxStreams; ++i) {
      cudaStream_t b = nullptr;
      CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
      gpus[g].b.push_back(b);
    }
    REFIT_ASSIGN_OR_RETURN(gpus[g].trainer, Allocate(plan.src, g, 0));
    REFIT_RETURN_IF_ERROR(Pattern(plan.src, g, gpus[g].trainer, 1, false));
    REFIT_ASSIGN_OR_RETURN(gpus[g].engine, Allocate(plan.dst, g, 0xEE));
    trainers[g] = gpus[g].trainer;
  }
  for (Gpu& x : gpus) {
    CK(cudaSetDevice(x.g));
    REFIT_ASSIGN_OR_RETURN(x.copies, ResolveEngineCopies(plan, x.g, trainers, x.engine));
    x.peer_joined = JoinForCopyEngine(x.copies.peer);  // one allocation a side
    x.peer_contiguous = JoinContiguous(x.copies.peer);
    std::vector<ResolvedCopy> all = x.copies.local;
    all.insert(all.end(), x.copies.peer.begin(), x.copies.peer.end());
    REFIT_RETURN_IF_ERROR(Upload(x.copies.local, &x.items[0], &x.n[0]));
    REFIT_RETURN_IF_ERROR(Upload(x.copies.peer, &x.items[1], &x.n[1]));
    REFIT_RETURN_IF_ERROR(Upload(all, &x.items[2], &x.n[2]));
    REFIT_RETURN_IF_ERROR(Upload(x.copies.peer, &x.items[3], &x.n[3], 256 << 10));
    for (const ResolvedCopy& r : x.peer_joined) {
      const bool short_rows = r.rows > 1 && r.row_bytes < (64 << 10);
      (short_rows ? x.peer_strided : x.peer_runs).push_back(r);
      (short_rows ? x.strided_bytes : x.runs_bytes) += r.rows * r.row_bytes;
    }
    REFIT_RETURN_IF_ERROR(Upload(x.peer_strided, &x.items[4], &x.n[4]));
  }
  std::map<std::string, std::string> out;
  int64_t local_max = 0, peer_max = 0, total_max = 0;
  for (Gpu& x : gpus) {
    local_max = std::max(local_max, x.copies.local_bytes);
    peer_max = std::max(peer_max, x.copies.peer_bytes);
    total_max = std::max(total_max, x.copies.local_bytes + x.copies.peer_bytes);
    int64_t strided = 0, min_row = 0, max_row = 0;
    for (const ResolvedCopy& r : x.peer_joined) {
      if (r.rows == 1) continue;
      ++strided;
      min_row = min_row == 0 ? r.row_bytes : std::min(min_row, r.row_bytes);
      max_row = std::max(max_row, r.row_bytes);
    }
    out[absl::StrCat("gpu", x.g)] = absl::StrFormat(
        "local %.3f GB, peer %.3f GB (%d copies, %d after joining, %d strided with rows of "
        "%d-%d bytes)",
        x.copies.local_bytes / 1e9, x.copies.peer_bytes / 1e9, x.copies.peer.size(),
        x.peer_joined.size(), strided, min_row, max_row);
  }
  out["local_bytes"] = absl::StrCat(local_max);
  out["peer_bytes"] = absl::StrCat(peer_max);
  // Checks: the engine's bytes start wrong and are checked after one run.
  auto checked = [&](const std::string& key,
                     const std::function<absl::Status(Gpu&)>& work) -> absl::Status {
    for (Gpu& x : gpus) {
      CK(cudaSetDevice(x.g));
      CK(cudaMemset(x.engine.base, 0xEE, x.engine.bytes));
      CK(cudaDeviceSynchronize());
    }
    REFIT_RETURN_IF_ERROR(Both(gpus, 0, work).status());
    std::string verdict = "PASS";
    for (Gpu& x : gpus) {
      CK(cudaSetDevice(x.g));
      absl::Status s = Pattern(plan.dst, x.g, x.engine, 1, true);
      if (!s.ok()) verdict = absl::StrCat("FAIL engine rank ", x.g, ": ", s.message());
    }
    out[key] = verdict;
    return absl::OkStatus();
  };
  auto kernel_all = [](Gpu& x) { return Pull(x, 2, x.a); };
  // The copy engines over `copies` on `streams` streams.
  auto ce_of = [](Gpu& x, const std::vector<ResolvedCopy>& copies, int streams) {
    return EnqueueCopyEngine(SpreadCopies(copies, streams),
                             absl::MakeConstSpan(x.b).subspan(0, streams));
  };
  auto ce = [&](Gpu& x, int streams) { return ce_of(x, x.peer_joined, streams); };
  auto ce_then_kernel = [&](Gpu& x) -> absl::Status {
    REFIT_RETURN_IF_ERROR(ce(x, 1));
    CK(cudaStreamSynchronize(static_cast<cudaStream_t>(x.b[0])));
    return Pull(x, 0, x.a);
  };
  // What the pull runner does: the kernel over the local copies, the copy
  // engines over the peer copies on `streams` streams, at once.
  auto hybrid = [&](Gpu& x, int streams) -> absl::Status {
    REFIT_RETURN_IF_ERROR(Pull(x, 0, x.a));
    return ce(x, streams);
  };
  REFIT_RETURN_IF_ERROR(checked("check_kernel", kernel_all));
  REFIT_RETURN_IF_ERROR(checked("check_ce", ce_then_kernel));
  REFIT_RETURN_IF_ERROR(checked("check_hybrid", [&](Gpu& x) { return hybrid(x, streams); }));

  auto row = [&](const std::string& key, const std::string& what, double ms, int64_t bytes,
                 double ref_ms) {
    out[key] = absl::StrCat(ms);
    table->push_back(absl::StrFormat("%-4s %-22s %8.2f ms %7.1f GB/s %6.3fx  %s", c.name, key,
                                     ms, ms > 0 ? bytes / 1e6 / ms : 0.0,
                                     ref_ms > 0 ? ms / ref_ms : 0.0, what));
    std::printf("%s\n", table->back().c_str());
    std::fflush(stdout);
  };
  // The floors.
  double peer_ms = 0, local_ms = 0;
  if (peer_max > 0) {
    REFIT_ASSIGN_OR_RETURN(peer_ms, Both(gpus, iters, [&](Gpu& x) -> absl::Status {
      const Gpu& o = gpus[1 - x.g];
      CK(cudaMemcpyPeerAsync(x.engine.base, x.g, o.trainer.base, o.g,
                             std::min(x.copies.peer_bytes, o.trainer.bytes), x.a));
      return absl::OkStatus();
    }));
    row("memcpy-peer", "one cudaMemcpyPeerAsync of the peer bytes, both directions", peer_ms,
        peer_max, peer_ms);
  }
  REFIT_ASSIGN_OR_RETURN(local_ms, Both(gpus, iters, [&](Gpu& x) -> absl::Status {
    CK(cudaMemcpyAsync(x.engine.base, x.trainer.base,
                       std::min(x.copies.local_bytes, x.trainer.bytes), cudaMemcpyDeviceToDevice,
                       x.a));
    return absl::OkStatus();
  }));
  row("memcpy-local", "one device copy of the local bytes, each GPU", local_ms, local_max,
      local_ms);
  if (peer_max > 0) {
    REFIT_ASSIGN_OR_RETURN(double k, Both(gpus, iters, [](Gpu& x) { return Pull(x, 1, x.a); }));
    row("kernel-peer", "pull kernel over the peer copies (64 KiB items)", k, peer_max, peer_ms);
    REFIT_ASSIGN_OR_RETURN(double k4, Both(gpus, iters, [](Gpu& x) { return Pull(x, 3, x.a); }));
    row("kernel-peer-256k", "the same in 256 KiB items", k4, peer_max, peer_ms);
    for (int n : {1, 2, 4, 8}) {
      REFIT_ASSIGN_OR_RETURN(double t, Both(gpus, iters, [&](Gpu& x) { return ce(x, n); }));
      row(absl::StrCat("ce-peer-", n), absl::StrCat("copy engines over the peer copies, ", n,
                                                    n == 1 ? " stream" : " streams"),
          t, peer_max, peer_ms);
    }
    // The peer copies' contiguous runs and strided copies apart (rates over
    // their own bytes; vs the peer floor at those bytes).
    int64_t runs_max = 0, strided_max = 0;
    for (const Gpu& x : gpus) {
      runs_max = std::max(runs_max, x.runs_bytes);
      strided_max = std::max(strided_max, x.strided_bytes);
    }
    const double peer_rate_ms = peer_max / peer_ms;  // bytes per ms
    REFIT_ASSIGN_OR_RETURN(double r1, Both(gpus, iters, [&](Gpu& x) {
      return ce_of(x, x.peer_runs, streams);
    }));
    REFIT_ASSIGN_OR_RETURN(double r0, Both(gpus, iters, [&](Gpu& x) {
      return ce_of(x, x.peer_contiguous, streams);
    }));
    row("ce-peer-unjoined", absl::StrCat("copy engines, contiguous runs joined but not evenly "
                                         "spaced pieces (", streams, " streams)"),
        r0, peer_max, peer_ms);
    row("ce-peer-runs", absl::StrCat("copy engines, the peer copies but strided short rows (",
                                     streams, " streams)"),
        r1, runs_max, runs_max / peer_rate_ms);
    if (strided_max > 0) {
      REFIT_ASSIGN_OR_RETURN(double r2, Both(gpus, iters, [&](Gpu& x) {
        return ce_of(x, x.peer_strided, streams);
      }));
      row("ce-peer-strided", absl::StrCat("copy engines, the strided peer copies with rows "
                                          "under 64 KiB only (", streams, " streams)"),
          r2, strided_max, strided_max / peer_rate_ms);
      REFIT_ASSIGN_OR_RETURN(double r3, Both(gpus, iters, [&](Gpu& x) { return Pull(x, 4, x.a); }));
      row("kernel-peer-strided", "pull kernel, those strided copies only", r3, strided_max,
          strided_max / peer_rate_ms);
    }
    // NCCL over the same pairs: each GPU sends its trainer's bytes that
    // the other engine reads, pre-packed, one message each way.
    ncclComm_t comms[kGpus];
    int devs[kGpus] = {0, 1};
    NK(ncclCommInitAll(comms, kGpus, devs));
    REFIT_ASSIGN_OR_RETURN(double nccl, Both(gpus, iters, [&](Gpu& x) -> absl::Status {
      if (x.g != 0) return absl::OkStatus();  // one thread posts both GPUs' group
      NK(ncclGroupStart());
      for (Gpu& y : gpus) {
        Gpu& o = gpus[1 - y.g];
        NK(ncclSend(y.trainer.base, std::min(o.copies.peer_bytes, y.trainer.bytes), ncclChar,
                    o.g, comms[y.g], y.a));
        NK(ncclRecv(y.engine.base, std::min(y.copies.peer_bytes, o.trainer.bytes), ncclChar,
                    o.g, comms[y.g], y.a));
      }
      NK(ncclGroupEnd());
      for (Gpu& y : gpus) CK(cudaStreamSynchronize(y.a));
      return absl::OkStatus();
    }));
    for (ncclComm_t cm : comms) (void)ncclCommDestroy(cm);
    row("nccl-peer", "NCCL send/recv of the peer bytes pre-packed, both directions", nccl,
        peer_max, peer_ms);
  }
  REFIT_ASSIGN_OR_RETURN(double kl, Both(gpus, iters, [](Gpu& x) { return Pull(x, 0, x.a); }));
  row("kernel-local", "pull kernel over the local copies", kl, local_max, local_ms);
  // The floor: the slowest GPU's local bytes at the device-copy rate plus
  // its peer bytes at the peer rate (bytes per ms, both measured above).
  const double local_rate = local_max / local_ms;
  const double peer_rate = peer_ms > 0 ? peer_max / peer_ms : 0;
  double floor_ms = 0;
  for (const Gpu& x : gpus) {
    floor_ms = std::max(floor_ms, x.copies.local_bytes / local_rate +
                                      (peer_rate > 0 ? x.copies.peer_bytes / peer_rate : 0));
  }
  out["floor_ms"] = absl::StrCat(floor_ms);
  REFIT_ASSIGN_OR_RETURN(double ka, Both(gpus, iters, kernel_all));
  row("kernel-all", "one pull kernel over all copies (vs local + peer floors)", ka, total_max,
      floor_ms);
  REFIT_ASSIGN_OR_RETURN(double h, Both(gpus, iters, [&](Gpu& x) { return hybrid(x, streams); }));
  row("hybrid", absl::StrCat("kernel over local || copy engines over peer (", streams,
                             " streams; vs floors)"),
      h, total_max, floor_ms);
  out["local_gbps"] = absl::StrCat(local_rate / 1e6);
  out["peer_gbps"] = absl::StrCat(peer_rate / 1e6);
  for (Gpu& x : gpus) {
    CK(cudaSetDevice(x.g));
    for (cuda::PullItem* p : x.items) (void)cudaFree(p);
    CK(cudaFree(x.trainer.base));
    CK(cudaFree(x.engine.base));
    CK(cudaStreamDestroy(x.a));
    for (void* b : x.b) CK(cudaStreamDestroy(static_cast<cudaStream_t>(b)));
  }
  return out;
}

}  // namespace refit::bench
