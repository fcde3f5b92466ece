// NcclTransport: lanes of NCCL communicators and CUDA streams.
#include "exec/transport/cuda/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/transport/cuda/nccl_status.h"

namespace refit {

struct NcclTransport::Lane {
  int32_t index = 0;
  ncclComm_t comm = nullptr;  // the waves'
  // The non-blocking communicator `comm` was split from,
  // and the peers `comm` has sent to / received from (connected), by rank.
  ncclComm_t parent = nullptr;
  std::vector<uint8_t> send_ready, recv_ready;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;               // unused spare (kept for teardown)
  std::deque<cudaEvent_t> pending;          // one per wave in flight, oldest first
  std::vector<cudaEvent_t> spare;           // recorded-and-waited events to reuse
  std::set<int32_t> peers;
  absl::Status error;
};

namespace {

// Between two polls of a group being enqueued or connected (microseconds
// when nothing waits on a peer): spins for the first 500 us since `start`
// (a 100 us sleep per wave was most of a small wave's cost), then sleeps
// 100 us.
void PausePoll(std::chrono::steady_clock::time_point start) {
  if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(500)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Calls fn(c) for every communicator of `comms` on a thread each, and
// returns when all have returned.
template <typename Fn>
void OnThreadEach(const std::vector<ncclComm_t>& comms, Fn fn) {
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (ncclComm_t c : comms) threads.emplace_back([c, &fn] { fn(c); });
  for (std::thread& t : threads) t.join();
}

// Polls ncclCommGetAsyncError until it leaves ncclInProgress.
absl::Status WaitComm(ncclComm_t comm, absl::Time deadline, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &r);
    if (q != ncclSuccess) return NcclStatus(q, what, comm);
    if (r != ncclInProgress) return NcclStatus(r, what, comm);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not complete by the deadline"));
    }
    PausePoll(start);
  }
}

// One group of `sends` and `recvs` on `comm` and `stream` (empty ones
// skipped); the first failing NCCL result, else ncclGroupEnd's.
ncclResult_t PostGroup(ncclComm_t comm, cudaStream_t stream, absl::Span<const SendOp> sends,
                       absl::Span<const RecvOp> recvs) {
  ncclResult_t r = ncclGroupStart();
  for (const SendOp& s : sends) {
    if (r != ncclSuccess && r != ncclInProgress) break;
    if (s.bytes > 0) r = ncclSend(s.ptr, s.bytes, ncclInt8, s.peer, comm, stream);
  }
  for (const RecvOp& v : recvs) {
    if (r != ncclSuccess && r != ncclInProgress) break;
    if (v.bytes > 0) r = ncclRecv(v.ptr, v.bytes, ncclInt8, v.peer, comm, stream);
  }
  const ncclResult_t e = ncclGroupEnd();
  return r == ncclSuccess || r == ncclInProgress ? e : r;
}

// A group posted by a helper thread (a peer not yet connected): the thread owns a reference, so a caller that gives up at
// its deadline leaves it valid.
struct HelperGroup {
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  ncclResult_t result = ncclSuccess;
  std::atomic<bool> done{false};
};

// Splits a blocking communicator off `parent` (non-blocking), polled
// against `deadline`. `*child` must outlive a timeout (NCCL's thread
// writes it when the split completes).
absl::Status SplitBlocking(ncclComm_t parent, int32_t rank, ncclComm_t* child,
                           absl::Time deadline, const std::string& what) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  const ncclResult_t r = ncclCommSplit(parent, 0, rank, child, &config);
  if (r != ncclSuccess && r != ncclInProgress) return NcclStatus(r, what, parent);
  REFIT_RETURN_IF_ERROR(WaitComm(parent, deadline, what));
  if (*child == nullptr) return absl::InternalError(absl::StrCat(what, ": no communicator"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclTransport>> NcclTransport::Create(
    KvStore* store, int32_t rank, int32_t world_size,
    NcclTransportOptions options) {
  if (store == nullptr || world_size < 1 || rank < 0 || rank >= world_size ||
      options.num_lanes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl transport: bad rank ", rank, " of ", world_size, " or ",
        options.num_lanes, " lanes"));
  }
  std::unique_ptr<NcclTransport> t(new NcclTransport());
  t->rank_ = rank;
  t->world_size_ = world_size;
  t->device_ = options.device;
  REFIT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options.device),
                                   absl::StrCat("rank ", rank, ": cudaSetDevice(",
                                                options.device, ")")));
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  for (int32_t l = 0; l < options.num_lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->index = l;
    const std::string key = absl::StrCat(options.key_prefix, "/lane", l, "/id");
    ncclUniqueId id;
    if (rank == 0) {
      REFIT_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
      REFIT_RETURN_IF_ERROR(
          store->Set(key, std::string(id.internal, sizeof(id.internal))));
    } else {
      REFIT_ASSIGN_OR_RETURN(std::string v,
                             store->Get(key, deadline - absl::Now()));
      if (v.size() != sizeof(id.internal)) {
        return absl::InvalidArgumentError(
            absl::StrCat("nccl unique id under ", key, " has ", v.size(),
                         " bytes"));
      }
      std::copy(v.begin(), v.end(), id.internal);
    }
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking),
        "cudaStreamCreate"));
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&lane->done, cudaEventDisableTiming),
        "cudaEventCreate"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const std::string what =
        absl::StrCat("rank ", rank, " lane ", l, ": ncclCommInitRankConfig");
    ncclResult_t r =
        ncclCommInitRankConfig(&lane->comm, world_size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return NcclStatus(r, what, lane->comm);
    }
    absl::Status s = WaitComm(lane->comm, deadline, what);
    if (!s.ok()) {
      ncclCommAbort(lane->comm);
      lane->comm = nullptr;
      return s;
    }
    ncclComm_t* child = &lane->parent;  // the lane holds it, kept on failure
    s = SplitBlocking(lane->comm, rank, child, deadline,
                      absl::StrCat("rank ", rank, " lane ", l, ": ncclCommSplit (blocking)"));
    if (!s.ok()) {
      ncclCommAbort(lane->comm);
      lane.release();  // NCCL's split may still write *child
      return s;
    }
    std::swap(lane->comm, lane->parent);
    lane->send_ready.assign(world_size, 0);
    lane->recv_ready.assign(world_size, 0);
    t->lanes_.push_back(std::move(lane));
  }
  return t;
}

NcclTransport::~NcclTransport() {
  for (auto& l : lanes_) {
    // A wave still in flight (the owner gave up on it) would hold a
    // blocking communicator's finalize: abort then.
    bool quiet = l->error.ok();
    for (cudaEvent_t e : l->pending) quiet = quiet && cudaEventQuery(e) == cudaSuccess;
    for (ncclComm_t c : {l->comm, l->parent}) {
      if (c == nullptr) continue;
      if (quiet) {
        ncclCommFinalize(c);
        WaitComm(c, absl::Now() + absl::Seconds(10), "finalize").IgnoreError();
        ncclCommDestroy(c);
      } else {
        ncclCommAbort(c);
      }
    }
    if (l->done != nullptr) cudaEventDestroy(l->done);
    for (cudaEvent_t e : l->pending) cudaEventDestroy(e);
    for (cudaEvent_t e : l->spare) cudaEventDestroy(e);
    if (l->stream != nullptr) cudaStreamDestroy(l->stream);
  }
}

int32_t NcclTransport::num_lanes() const {
  return static_cast<int32_t>(lanes_.size());
}

void* NcclTransport::stream(int32_t lane) const {
  if (lane < 0 || lane >= num_lanes()) return nullptr;
  return lanes_[lane]->stream;
}

absl::Status NcclTransport::Abort(Lane& lane, absl::Status why) {
  // Every lane, not only the failing one (see the header), and all at once,
  // each step on a thread per communicator: ncclCommRevoke sets its
  // communicator's abort flag, then waits for its streams and its proxy,
  // and ncclCommAbort waits for the device, either of which a kernel of
  // another lane still spinning on a dead peer keeps busy (over NCCL's
  // network transport the proxy frees host memory, which waits for the
  // device) until that lane is revoked too. So first revoke every
  // communicator concurrently (stops their in-flight operations), then
  // abort them concurrently.
  std::vector<ncclComm_t> comms;
  for (auto& l : lanes_) {
    for (ncclComm_t* c : {&l->comm, &l->parent}) {
      if (*c != nullptr) comms.push_back(*c);
      *c = nullptr;
    }
  }
  OnThreadEach(comms, [](ncclComm_t c) { ncclCommRevoke(c, NCCL_REVOKE_DEFAULT); });
  OnThreadEach(comms, [](ncclComm_t c) { ncclCommAbort(c); });
  for (auto& l : lanes_) {
    if (l->error.ok()) {
      l->error = l.get() == &lane
                     ? why
                     : absl::Status(why.code(),
                                    absl::StrCat("lane ", l->index,
                                                 " aborted with lane ", lane.index,
                                                 ": ", why.message()));
    }
    for (cudaEvent_t e : l->pending) l->spare.push_back(e);
    l->pending.clear();
  }
  return why;
}

void NcclTransport::Cancel(const absl::Status& reason) { cancel_.Cancel(reason); }

absl::Status NcclTransport::CheckCancelled() {
  if (!cancel_.cancelled()) return absl::OkStatus();
  if (lanes_.empty()) return cancel_.status();
  return Abort(*lanes_[0], cancel_.status());
}

absl::Status NcclTransport::StartWave(int32_t lane,
                                       absl::Span<const SendOp> sends,
                                       absl::Span<const RecvOp> recvs,
                                       absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckWaveArguments(rank_, world_size_, num_lanes(), lane, sends, recvs));
  Lane& L = *lanes_[lane];
  if (!L.error.ok()) return L.error;
  if (cancel_.cancelled()) return Abort(L, cancel_.status());
  if (L.pending.empty()) L.peers.clear();
  for (const SendOp& s : sends) {
    if (s.bytes > 0) L.peers.insert(s.peer);
  }
  for (const RecvOp& v : recvs) {
    if (v.bytes > 0) L.peers.insert(v.peer);
  }
  const std::string what = absl::StrCat("rank ", rank_, " lane ", lane);
  absl::Status s;
  if (Connected(L, sends, recvs)) {
    const ncclResult_t r = PostGroup(L.comm, L.stream, sends, recvs);
    if (r != ncclSuccess) s = NcclStatus(r, what + ": posting a wave", L.comm);
  } else {
    s = FirstGroup(L, sends, recvs, deadline, what);
  }
  if (!s.ok()) return Abort(L, s);
  cudaEvent_t ev = nullptr;
  if (!L.spare.empty()) {
    ev = L.spare.back();
    L.spare.pop_back();
  } else {
    s = CudaStatus(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                   what + ": cudaEventCreate");
    if (!s.ok()) return Abort(L, s);
  }
  s = CudaStatus(cudaEventRecord(ev, L.stream), what + ": cudaEventRecord");
  if (!s.ok()) {
    cudaEventDestroy(ev);
    return Abort(L, s);
  }
  L.pending.push_back(ev);
  return absl::OkStatus();
}

bool NcclTransport::Connected(const Lane& L, absl::Span<const SendOp> sends,
                              absl::Span<const RecvOp> recvs) {
  for (const SendOp& s : sends) {
    if (s.bytes > 0 && !L.send_ready[s.peer]) return false;
  }
  for (const RecvOp& v : recvs) {
    if (v.bytes > 0 && !L.recv_ready[v.peer]) return false;
  }
  return true;
}

absl::Status NcclTransport::FirstGroup(Lane& L, absl::Span<const SendOp> sends,
                                       absl::Span<const RecvOp> recvs, absl::Time deadline,
                                       const std::string& what) {
  auto job = std::make_shared<HelperGroup>();
  job->sends.assign(sends.begin(), sends.end());
  job->recvs.assign(recvs.begin(), recvs.end());
  std::thread([job, comm = L.comm, stream = L.stream, device = device_] {
    cudaSetDevice(device);
    job->result = PostGroup(comm, stream, job->sends, job->recvs);
    job->done.store(true, std::memory_order_release);
  }).detach();
  const auto start = std::chrono::steady_clock::now();
  while (!job->done.load(std::memory_order_acquire)) {
    absl::Status late;
    if (cancel_.cancelled()) {
      late = cancel_.status();
    } else if (absl::Now() > deadline) {
      late = absl::DeadlineExceededError(
          absl::StrCat(what, ": connecting to its peers not done by the deadline"));
    }
    if (!late.ok()) {
      L.comm = nullptr;  // the helper's (leaked): aborting it under the helper is unsafe
      return late;
    }
    PausePoll(start);
  }
  if (job->result != ncclSuccess) {
    return NcclStatus(job->result, what + ": posting a wave (connecting)", L.comm);
  }
  for (const SendOp& s : sends) {
    if (s.bytes > 0) L.send_ready[s.peer] = 1;
  }
  for (const RecvOp& v : recvs) {
    if (v.bytes > 0) L.recv_ready[v.peer] = 1;
  }
  return absl::OkStatus();
}

absl::Status NcclTransport::WaitWave(int32_t lane, absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckLane(rank_, lane, num_lanes()));
  Lane& L = *lanes_[lane];
  if (!L.error.ok()) return L.error;
  if (L.pending.empty()) return absl::OkStatus();
  const std::string what =
      absl::StrCat("rank ", rank_, " lane ", lane, " (peers ",
                   absl::StrJoin(L.peers, ", "), ")");
  // Poll without sleeping at first: a short wave (a delta round's headers)
  // completes within microseconds, and a sleep overshoots by tens.
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    cudaError_t q = cudaEventQuery(L.pending.front());
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      return Abort(L, CudaStatus(q, what + ": wave failed"));
    }
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(L.comm, &r);
    if (r != ncclSuccess && r != ncclInProgress) {
      return Abort(L, NcclStatus(r, what + ": peer or network failure", L.comm));
    }
    if (cancel_.cancelled()) return Abort(L, cancel_.status());
    if (absl::Now() > deadline) {
      const char* last = ncclGetLastError(L.comm);
      return Abort(L, absl::DeadlineExceededError(absl::StrCat(
                          what, ": wave not complete by the deadline; "
                          "communicator aborted",
                          last && *last ? absl::StrCat(" (", last, ")") : "")));
    }
    if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  L.spare.push_back(L.pending.front());
  L.pending.pop_front();
  return absl::OkStatus();
}

}  // namespace refit
