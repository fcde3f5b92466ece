// The baselines of refit_gpu_bench (see refit_gpu_baselines.h).
#include "bench/refit_gpu_baselines.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/transport/cuda/nccl_status.h"
#include "exec/program/plan_side.h"

namespace refit {
namespace gpu_bench {

#define CK(x) REFIT_RETURN_IF_CUDA_ERROR(x)
#define NK(x) REFIT_RETURN_IF_ERROR(NcclStatus((x), #x))

PairBytes CountPairs(const Plan& plan) {
  PairBytes p;
  for (const Message& m : plan.messages) p.pair[{m.src_rank, m.dst_rank}] += m.bytes;
  for (const Message& m : plan.messages) {
    for (int32_t s = m.first_segment; s < m.first_segment + m.num_segments; ++s) {
      p.segments.emplace_back(m.src_rank, m.dst_rank, plan.segments[s].bytes);
    }
  }
  return p;
}

absl::StatusOr<double> RawNccl(ncclComm_t comm, cudaStream_t s, int g,
                               const std::vector<std::tuple<int, int, int64_t>>& ops,
                               int iters) {
  int64_t send_total = 0, recv_total = 0;
  for (const auto& [a, b, n] : ops) {
    if (a == g) send_total += n;
    if (b == g) recv_total += n;
  }
  char *sbuf = nullptr, *rbuf = nullptr;
  if (send_total > 0) CK(cudaMalloc(&sbuf, send_total));
  if (recv_total > 0) CK(cudaMalloc(&rbuf, recv_total));
  auto once = [&]() -> absl::Status {
    int64_t so = 0, ro = 0;
    NK(ncclGroupStart());
    for (const auto& [a, b, n] : ops) {
      if (a == g) {
        NK(ncclSend(sbuf + so, n, ncclChar, b, comm, s));
        so += n;
      }
      if (b == g) {
        NK(ncclRecv(rbuf + ro, n, ncclChar, a, comm, s));
        ro += n;
      }
    }
    NK(ncclGroupEnd());
    CK(cudaStreamSynchronize(s));
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(once());
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(once());
  const double sec = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
  if (sbuf) CK(cudaFree(sbuf));
  if (rbuf) CK(cudaFree(rbuf));
  return sec;
}

absl::StatusOr<double> Broadcast(ncclComm_t bcomm, ncclComm_t tcomm,
                                 cudaStream_t s, int bpos, int tpos,
                                 int tsize, int64_t total, double keep,
                                 int iters) {
  const int64_t bucket = int64_t{1} << 30;
  char *buf = nullptr, *kept = nullptr;
  CK(cudaMalloc(&buf, bucket));
  const int64_t keep_bytes = static_cast<int64_t>(bucket * keep);
  if (bcomm != nullptr && bpos > 0) CK(cudaMalloc(&kept, keep_bytes));
  auto once = [&]() -> absl::Status {
    for (int64_t off = 0; off < total; off += bucket) {
      const int64_t n = std::min(bucket, total - off);
      if (tcomm != nullptr && tsize > 1) {
        // Trainer rank j's share of the bucket lands at j * share on rank 0.
        const int64_t share = n / tsize;
        NK(ncclGroupStart());
        if (tpos == 0) {
          for (int j = 1; j < tsize; ++j) {
            NK(ncclRecv(buf + j * share, share, ncclChar, j, tcomm, s));
          }
        } else {
          NK(ncclSend(buf + tpos * share, share, ncclChar, 0, tcomm, s));
        }
        NK(ncclGroupEnd());
      }
      if (bcomm == nullptr) continue;
      NK(ncclBroadcast(buf, buf, n, ncclChar, 0, bcomm, s));
      if (bpos > 0) {
        const int64_t part = static_cast<int64_t>(n * keep);
        const int64_t at = std::min<int64_t>((bpos - 1) * part, n - part);
        CK(cudaMemcpyAsync(kept, buf + at, part, cudaMemcpyDeviceToDevice, s));
      }
    }
    CK(cudaStreamSynchronize(s));
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(once());
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(once());
  const double sec = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
  CK(cudaFree(buf));
  if (kept) CK(cudaFree(kept));
  return sec;
}

absl::StatusOr<double> RoundsOnly(const Plan& plan, Side side, int rank,
                                  Transport* t, int iters) {
  const int lanes = t->num_lanes();
  std::vector<int64_t> need(lanes, 0);
  struct R {
    int lane;
    std::vector<std::tuple<bool, int32_t, int64_t>> ops;  // send?, peer, bytes
  };
  std::vector<R> rounds;
  for (const Wave& round : plan.waves) {
    R r{round.lane % lanes, {}};
    int64_t bytes = 0;
    for (int32_t i = round.first_message; i < round.first_message + round.num_messages; ++i) {
      const Message& m = plan.messages[i];
      const bool send = side == Side::kTrainer && m.src_rank == rank;
      const bool recv = side == Side::kEngine && m.dst_rank == rank;
      if (!send && !recv) continue;
      r.ops.emplace_back(send,
                         send ? GlobalRank(plan, Side::kEngine, m.dst_rank)
                              : GlobalRank(plan, Side::kTrainer, m.src_rank),
                         m.bytes);
      bytes += m.bytes;
    }
    if (r.ops.empty()) continue;
    need[r.lane] = std::max(need[r.lane], bytes);
    rounds.push_back(std::move(r));
  }
  std::vector<char*> scratch(lanes, nullptr);
  for (int l = 0; l < lanes; ++l) {
    if (need[l] > 0) CK(cudaMalloc(&scratch[l], need[l]));
  }
  auto once = [&]() -> absl::Status {
    std::vector<int> posted(lanes, 0);
    for (const R& r : rounds) {
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      int64_t off = 0;
      for (const auto& [send, peer, bytes] : r.ops) {
        if (send) sends.push_back(SendOp{peer, scratch[r.lane] + off, bytes});
        else recvs.push_back(RecvOp{peer, scratch[r.lane] + off, bytes});
        off += bytes;
      }
      if (posted[r.lane] >= t->max_waves_per_lane()) {
        REFIT_RETURN_IF_ERROR(t->WaitWave(r.lane, absl::Now() + absl::Seconds(120)));
        --posted[r.lane];
      }
      REFIT_RETURN_IF_ERROR(
          t->StartWave(r.lane, sends, recvs, absl::Now() + absl::Seconds(120)));
      ++posted[r.lane];
    }
    for (int l = 0; l < lanes; ++l) {
      for (; posted[l] > 0; --posted[l]) {
        REFIT_RETURN_IF_ERROR(t->WaitWave(l, absl::Now() + absl::Seconds(120)));
      }
    }
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(once());
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(once());
  const double sec = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
  for (char* p : scratch) {
    if (p) CK(cudaFree(p));
  }
  return sec;
}

}  // namespace gpu_bench
}  // namespace refit
