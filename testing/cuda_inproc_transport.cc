// CudaInProcTransport: threads of one process, matched pairs copied on the
// device behind gates on the lanes' streams.
#include "testing/cuda_inproc_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "testing/cuda_inproc_kernels.h"

namespace refit {
namespace testing {
namespace {

// A hardware queue per stream, and every kernel loaded when the context is
// made (see the header), set before main so before any CUDA call of a
// binary that links this transport.
const bool kMaxConnections = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/1);
  return true;
}();

// Makes a rank's device current on the calling thread until it goes out of
// scope.
class DeviceScope {
 public:
  explicit DeviceScope(int32_t device) {
    cudaGetDevice(&saved_);
    cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(saved_); }

 private:
  int saved_ = 0;
};

// The host function after a copy: opens the gate of the op posted first.
struct OpenGate {
  volatile int32_t* flag;
  static void CUDART_CB Run(void* p) {
    auto* g = static_cast<OpenGate*>(p);
    *g->flag = 1;
    delete g;
  }
};

// A new event (timing off) owned by a shared_ptr that destroys it.
absl::StatusOr<std::shared_ptr<CUevent_st>> NewEvent(const std::string& what) {
  cudaEvent_t e = nullptr;
  REFIT_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what + ": cudaEventCreate"));
  return std::shared_ptr<CUevent_st>(e, [](cudaEvent_t x) { cudaEventDestroy(x); });
}

}  // namespace

absl::StatusOr<std::shared_ptr<CudaInProcFabric>> CudaInProcFabric::Create(int32_t world_size,
                                                                           int32_t num_lanes) {
  if (world_size < 1 || num_lanes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-process device fabric needs world_size >= 1 and lanes >= 1, got ",
                     world_size, " and ", num_lanes));
  }
  std::shared_ptr<CudaInProcFabric> f(new CudaInProcFabric(world_size, num_lanes));
  absl::MutexLock l(&f->mu_);
  f->failed_.assign(world_size, absl::OkStatus());
  return f;
}

void CudaInProcFabric::Kill(int32_t rank) {
  if (rank < 0 || rank >= world_size_) return;
  Fail(rank, absl::AbortedError(absl::StrCat("rank ", rank, " killed")));
}

absl::Status CudaInProcFabric::RankError(int32_t rank) {
  absl::MutexLock l(&mu_);
  return failed_[rank];
}

void CudaInProcFabric::Fail(int32_t rank, absl::Status why) {
  absl::MutexLock l(&mu_);
  FailLocked(rank, std::move(why));
}

void CudaInProcFabric::FailLocked(int32_t rank, absl::Status why) {
  std::vector<std::pair<int32_t, absl::Status>> work = {{rank, std::move(why)}};
  while (!work.empty()) {
    auto [x, st] = std::move(work.back());
    work.pop_back();
    if (!failed_[x].ok()) continue;
    failed_[x] = st;
    // Withdraw every unmatched op of x or waiting on x: its gate opens (the
    // owner's lane is failed, so what the gate guarded is never read as
    // data), and an owner other than x fails naming x.
    for (auto* queues : {&sends_, &recvs_}) {
      for (auto& [key, q] : *queues) {
        const auto& [lane, from, to] = key;
        if (from != x && to != x) continue;
        for (Op& op : q) {
          *op.flag = 2;
          if (op.owner != x && failed_[op.owner].ok()) {
            work.push_back({op.owner, absl::AbortedError(absl::StrCat(
                                          "rank ", op.owner, " lane ", lane, ": peer rank ", x,
                                          " failed (", st.message(), ")"))});
          }
        }
        q.clear();
      }
    }
  }
}

absl::Status CudaInProcFabric::CopyLocked(const Op& send, const Op& recv, const Op& first,
                                          cudaStream_t stream) {
  const std::string what = absl::StrCat("lane ", send.lane, ": rank ", send.owner, " to rank ",
                                        recv.owner);
  if (send.bytes != recv.bytes) {
    return absl::InternalError(absl::StrCat(what, ": rank ", send.owner, " sends ", send.bytes,
                                            " bytes but rank ", recv.owner, " expects ",
                                            recv.bytes));
  }
  REFIT_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, first.ready.get(), 0),
                                   what + ": cudaStreamWaitEvent"));
  REFIT_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(recv.ptr, send.ptr, send.bytes, cudaMemcpyDefault, stream),
                 what + ": cudaMemcpyAsync"));
  auto* gate = new OpenGate{first.flag};
  absl::Status s = CudaStatus(cudaLaunchHostFunc(stream, &OpenGate::Run, gate),
                              what + ": cudaLaunchHostFunc");
  if (!s.ok()) delete gate;
  return s;
}

absl::Status CudaInProcFabric::Post(int32_t rank, std::vector<Op> sends, std::vector<Op> recvs) {
  absl::MutexLock l(&mu_);
  if (!failed_[rank].ok()) return failed_[rank];
  for (const auto* ops : {&sends, &recvs}) {
    for (const Op& op : *ops) {
      if (failed_[op.peer].ok()) continue;
      FailLocked(rank, absl::AbortedError(absl::StrCat("rank ", rank, " lane ", op.lane,
                                                       ": peer rank ", op.peer, " failed (",
                                                       failed_[op.peer].message(), ")")));
      return failed_[rank];
    }
  }
  // Matches each op with the peer's oldest unmatched counterpart, else
  // queues it; a failed copy opens both gates and fails both ranks.
  auto match = [&](Op& mine, std::deque<Op>& theirs, std::deque<Op>& queue,
                   bool sending) -> absl::Status {
    if (theirs.empty()) {
      queue.push_back(std::move(mine));
      return absl::OkStatus();
    }
    Op other = std::move(theirs.front());
    theirs.pop_front();
    // The copy on this (the second) poster's lane stream, after the first
    // poster's ready event; this op needs no gate.
    *mine.flag = 1;
    absl::Status s = sending ? CopyLocked(mine, other, other, mine.stream)
                             : CopyLocked(other, mine, other, mine.stream);
    if (s.ok()) return s;
    *mine.flag = 2;
    *other.flag = 2;
    FailLocked(other.owner, s);
    FailLocked(rank, s);
    return s;
  };
  for (Op& op : sends) {
    const Key k{op.lane, rank, op.peer};
    REFIT_RETURN_IF_ERROR(match(op, recvs_[k], sends_[k], true));
  }
  for (Op& op : recvs) {
    const Key k{op.lane, op.peer, rank};
    REFIT_RETURN_IF_ERROR(match(op, sends_[k], recvs_[k], false));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaInProcTransport>> CudaInProcTransport::Create(
    std::shared_ptr<CudaInProcFabric> fabric, int32_t rank, CudaInProcTransportOptions options) {
  if (fabric == nullptr || rank < 0 || rank >= fabric->world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-process device transport: rank ", rank, " out of range"));
  }
  std::unique_ptr<CudaInProcTransport> t(new CudaInProcTransport(fabric, rank, options));
  DeviceScope scope(options.device);
  t->lanes_.resize(fabric->num_lanes());
  for (Lane& lane : t->lanes_) {
    REFIT_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
                   absl::StrCat("rank ", rank, ": cudaStreamCreate on device ", options.device),
                   absl::StatusCode::kUnavailable));
  }
  // Gate flags made now: pinned allocations may synchronize the device,
  // which must not happen while a peer's gate waits on this thread.
  for (int32_t i = 0; i < kPreparedBlocks; ++i) {
    REFIT_ASSIGN_OR_RETURN(FlagBlock b, t->NewFlags(kFlagsPerBlock));
    t->free_flags_.push_back(b);
  }
  return t;
}

CudaInProcTransport::~CudaInProcTransport() {
  DeviceScope scope(device_);
  fabric_->Fail(rank_, absl::AbortedError(absl::StrCat("rank ", rank_, " closed its transport")));
  // Every gate is open now or opens when its matched copy is done; wait
  // (bounded) for that before freeing the flags the gates read.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool drained = true;
  for (Lane& lane : lanes_) {
    for (Wave& w : lane.pending) {
      while (drained && cudaEventQuery(w.done) == cudaErrorNotReady) {
        if (absl::Now() > deadline) drained = false;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }
  for (Lane& lane : lanes_) {
    for (Wave& w : lane.pending) {
      cudaEventDestroy(w.done);
      free_flags_.push_back(w.flags);
    }
    if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
  }
  if (!drained) return;  // a gate may still read the flags: leave them
  // (retired_flags_ stay too: a copy matched before its wave failed to
  // post may still set them.)
  for (const FlagBlock& b : free_flags_) cudaFreeHost(b.host);
}

void* CudaInProcTransport::stream(int32_t lane) const {
  if (lane < 0 || lane >= num_lanes()) return nullptr;
  return lanes_[lane].stream;
}

absl::Status CudaInProcTransport::Fail(absl::Status why) {
  fabric_->Fail(rank_, why);
  return fabric_->RankError(rank_);
}

void CudaInProcTransport::Cancel(const absl::Status& reason) {
  cancel_.Cancel(reason);
  fabric_->Fail(rank_, cancel_.status());
}

absl::Status CudaInProcTransport::CheckCancelled() { return cancel_.status(); }

absl::StatusOr<CudaInProcTransport::FlagBlock> CudaInProcTransport::NewFlags(int32_t n) {
  FlagBlock b;
  b.capacity = n;
  const std::string what = absl::StrCat("rank ", rank_, ": gate flags");
  REFIT_RETURN_IF_ERROR(
      CudaStatus(cudaHostAlloc(reinterpret_cast<void**>(&b.host), b.capacity * sizeof(int32_t),
                               cudaHostAllocMapped | cudaHostAllocPortable),
                 what + ": cudaHostAlloc"));
  b.device = b.host;  // mapped memory has one address on host and device (UVA)
  return b;
}

absl::StatusOr<CudaInProcTransport::FlagBlock> CudaInProcTransport::TakeFlags(int32_t n) {
  FlagBlock b;
  auto fits = std::find_if(free_flags_.begin(), free_flags_.end(),
                           [n](const FlagBlock& f) { return f.capacity >= n; });
  if (fits != free_flags_.end()) {
    b = *fits;
    free_flags_.erase(fits);
  } else {
    REFIT_ASSIGN_OR_RETURN(b, NewFlags(std::max(n, kFlagsPerBlock)));
  }
  volatile int32_t* h = b.host;
  for (int32_t i = 0; i < n; ++i) h[i] = 0;
  return b;
}

absl::Status CudaInProcTransport::StartWave(int32_t lane, absl::Span<const SendOp> sends,
                                            absl::Span<const RecvOp> recvs,
                                            absl::Time /*deadline: never waits*/) {
  REFIT_RETURN_IF_ERROR(
      CheckWaveArguments(rank_, world_size(), num_lanes(), lane, sends, recvs));
  REFIT_RETURN_IF_ERROR(fabric_->RankError(rank_));
  DeviceScope scope(device_);
  Lane& L = lanes_[lane];
  const std::string what = absl::StrCat("rank ", rank_, " lane ", lane);
  std::vector<CudaInProcFabric::Op> send_ops, recv_ops;
  Wave w;
  for (const SendOp& s : sends) {
    if (s.bytes > 0) send_ops.push_back({rank_, lane, s.peer, const_cast<void*>(s.ptr), s.bytes});
  }
  for (const RecvOp& r : recvs) {
    if (r.bytes > 0) recv_ops.push_back({rank_, lane, r.peer, r.ptr, r.bytes});
  }
  const int32_t n = static_cast<int32_t>(send_ops.size() + recv_ops.size());
  absl::StatusOr<FlagBlock> flags = TakeFlags(n);
  if (!flags.ok()) return Fail(flags.status());
  w.flags = *flags;
  absl::StatusOr<std::shared_ptr<CUevent_st>> ready = NewEvent(what);
  if (!ready.ok()) return Fail(ready.status());
  absl::Status s = CudaStatus(cudaEventRecord(ready->get(), L.stream), what + ": cudaEventRecord");
  if (!s.ok()) return Fail(s);
  int32_t i = 0;
  for (auto* ops : {&send_ops, &recv_ops}) {
    for (CudaInProcFabric::Op& op : *ops) {
      op.ready = *ready;
      op.stream = L.stream;
      op.flag = w.flags.host + i;
      w.peers.push_back(op.peer);
      ++i;
    }
  }
  w.ready = *ready;  // released with the wave, by this rank's thread
  s = fabric_->Post(rank_, std::move(send_ops), std::move(recv_ops));
  if (s.ok()) {
    s = CudaStatus(static_cast<cudaError_t>(LaunchWaitFlags(w.flags.device, n, L.stream)),
                   what + ": the wave's gate");
  }
  if (s.ok()) {
    s = CudaStatus(cudaEventCreateWithFlags(&w.done, cudaEventDisableTiming),
                   what + ": cudaEventCreate");
  }
  if (s.ok()) s = CudaStatus(cudaEventRecord(w.done, L.stream), what + ": cudaEventRecord");
  if (!s.ok()) {
    if (w.done != nullptr) cudaEventDestroy(w.done);
    retired_flags_.push_back(w.flags);  // a matched copy may still set them
    return Fail(s);
  }
  std::sort(w.peers.begin(), w.peers.end());
  w.peers.erase(std::unique(w.peers.begin(), w.peers.end()), w.peers.end());
  L.pending.push_back(std::move(w));
  return absl::OkStatus();
}

absl::Status CudaInProcTransport::WaitWave(int32_t lane, absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckLane(rank_, lane, num_lanes()));
  Lane& L = lanes_[lane];
  REFIT_RETURN_IF_ERROR(fabric_->RankError(rank_));
  if (L.pending.empty()) return absl::OkStatus();
  Wave& w = L.pending.front();
  const auto start = std::chrono::steady_clock::now();
  auto what = [&] {
    return absl::StrCat("rank ", rank_, " lane ", lane, " (peers ", absl::StrJoin(w.peers, ", "),
                        ")");
  };
  while (true) {
    const cudaError_t q = cudaEventQuery(w.done);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) return Fail(CudaStatus(q, what() + ": wave failed"));
    REFIT_RETURN_IF_ERROR(fabric_->RankError(rank_));
    if (absl::Now() > deadline) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat(what(), ": wave not complete by the deadline")));
    }
    if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // A gate opened by a failure (its op withdrawn) completes the event too.
  REFIT_RETURN_IF_ERROR(fabric_->RankError(rank_));
  cudaEventDestroy(w.done);
  free_flags_.push_back(w.flags);
  L.pending.pop_front();
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace refit
