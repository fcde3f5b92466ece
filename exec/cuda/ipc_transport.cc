// IpcTransport (see ipc_transport.h).
#include "exec/cuda/ipc_transport.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace refit {
namespace {

// Where a message lies in its sender's memory, as the receiver needs it.
// A receiver in the sender's own process (both members in one process)
// uses the address itself: CUDA IPC handles do not open in their own
// process.
struct Placement {
  char handle[sizeof(cudaIpcMemHandle_t)];
  int64_t offset;
  int64_t bytes;
  int64_t pid;
  uint64_t address;
};

using GetRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cuMemGetAddressRange through the runtime (no link-time libcuda).
GetRangeFn GetRange() {
  static const GetRangeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<GetRangeFn>(nullptr);
    }
    return reinterpret_cast<GetRangeFn>(f);
  }();
  return fn;
}

absl::Status Cuda(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

struct IpcTransport::Lane {
  cudaStream_t stream = nullptr;
  bool in_flight = false;
  std::vector<Placement> out, in;
  std::vector<int32_t> ack_to, ack_from;  // receiver: senders; sender: receivers
  std::vector<char> ack_in;
  char ack_out = 1;
  absl::Status broken;
};

absl::StatusOr<std::unique_ptr<IpcTransport>> IpcTransport::Create(
    KvStore* store, int32_t rank, int32_t world_size, IpcTransportOptions options) {
  std::unique_ptr<IpcTransport> t(new IpcTransport());
  t->rank_ = rank;
  t->world_size_ = world_size;
  t->device_ = options.device;
  REFIT_RETURN_IF_ERROR(Cuda(cudaSetDevice(options.device),
                             absl::StrCat("cudaSetDevice(", options.device, ")")));
  if (GetRange() == nullptr) {
    return absl::UnavailableError(
        "CUDA IPC transport: the driver's cuMemGetAddressRange is not available");
  }
  GlooTransportOptions g;
  g.num_lanes = options.num_lanes;
  g.hostname = "127.0.0.1";
  g.key_prefix = absl::StrCat(options.key_prefix, "/control");
  g.connect_timeout = options.connect_timeout;
  REFIT_ASSIGN_OR_RETURN(t->control_, GlooTransport::Create(store, rank, world_size, g));
  for (int32_t i = 0; i < t->control_->num_lanes(); ++i) {
    auto lane = std::make_unique<Lane>();
    REFIT_RETURN_IF_ERROR(Cuda(
        cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking),
        "cudaStreamCreate"));
    t->lanes_.push_back(std::move(lane));
  }
  return t;
}

IpcTransport::~IpcTransport() {
  (void)cudaSetDevice(device_);
  // Copies still queued (a failed round) finish or fail on their own; wait
  // for them a bounded time before the streams and mappings go.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  for (auto& l : lanes_) {
    if (l->stream == nullptr) continue;
    while (cudaStreamQuery(l->stream) == cudaErrorNotReady && absl::Now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    (void)cudaStreamDestroy(l->stream);
  }
  for (auto& [h, p] : opened_) (void)cudaIpcCloseMemHandle(p);
  (void)cudaGetLastError();
}

int32_t IpcTransport::num_lanes() const { return static_cast<int32_t>(lanes_.size()); }

void* IpcTransport::stream(int32_t lane) const {
  if (lane < 0 || lane >= num_lanes()) return nullptr;
  return lanes_[lane]->stream;
}

void IpcTransport::Cancel(const absl::Status& reason) {
  cancel_.Cancel(reason);
  if (control_ != nullptr) control_->Cancel(reason);
}

absl::Status IpcTransport::CheckCancelled() { return cancel_.status(); }

absl::Status IpcTransport::SyncStream(int32_t lane, absl::Time deadline,
                                      const char* what) {
  cudaStream_t s = lanes_[lane]->stream;
  while (true) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) return Cuda(q, absl::StrCat("lane ", lane, " ", what));
    REFIT_RETURN_IF_ERROR(CheckCancelled());
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank_, " lane ", lane, ": ", what, " not complete by the deadline"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
}

absl::Status IpcTransport::Export(const void* p, int64_t bytes, std::string* handle,
                                  int64_t* offset) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = exported_.upper_bound(a);
  if (it != exported_.begin()) {
    --it;
    if (a >= it->first && a + static_cast<uintptr_t>(bytes) <= it->second.first) {
      *handle = it->second.second;
      *offset = static_cast<int64_t>(a - it->first);
      return absl::OkStatus();
    }
  }
  const std::string where = absl::StrFormat("device memory at %p (%d bytes)", p, bytes);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (GetRange()(&base, &size, static_cast<CUdeviceptr>(a)) != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " is not a device allocation this process can name"));
  }
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        where, " cannot be shared through CUDA IPC (", cudaGetErrorString(e),
        "): it must come from cudaMalloc (PyTorch: without "
        "expandable_segments)"));
  }
  std::string hs(reinterpret_cast<const char*>(&h), sizeof(h));
  exported_[static_cast<uintptr_t>(base)] = {static_cast<uintptr_t>(base) + size, hs};
  *handle = hs;
  *offset = static_cast<int64_t>(a - static_cast<uintptr_t>(base));
  return absl::OkStatus();
}

absl::StatusOr<char*> IpcTransport::Open(int32_t peer, const std::string& handle) {
  auto it = opened_.find(handle);
  if (it != opened_.end()) return it->second;
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank_, ": cannot open the CUDA IPC handle of rank ", peer,
        "'s memory: ", cudaGetErrorString(e), " (both must be on this host)"));
  }
  opened_[handle] = static_cast<char*>(p);
  return static_cast<char*>(p);
}

absl::Status IpcTransport::StartRound(int32_t lane, absl::Span<const SendOp> sends,
                                      absl::Span<const RecvOp> recvs,
                                      absl::Time deadline) {
  if (lane < 0 || lane >= num_lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("lane ", lane, " out of range"));
  }
  Lane& L = *lanes_[lane];
  REFIT_RETURN_IF_ERROR(L.broken);
  REFIT_RETURN_IF_ERROR(CheckCancelled());
  if (L.in_flight) {
    return absl::FailedPreconditionError(
        absl::StrCat("lane ", lane, ": a round is still in flight"));
  }
  auto fail = [&L](absl::Status s) {
    L.broken = s;
    return s;
  };
  (void)cudaSetDevice(device_);
  // What this rank sends is packed once its lane's stream is done.
  if (!sends.empty()) {
    absl::Status s = SyncStream(lane, deadline, "packing");
    if (!s.ok()) return fail(s);
  }
  L.out.assign(sends.size(), Placement{});
  L.in.assign(recvs.size(), Placement{});
  std::vector<SendOp> cs;
  std::vector<RecvOp> cr;
  for (size_t i = 0; i < sends.size(); ++i) {
    std::string h;
    int64_t off = 0;
    absl::Status s = Export(sends[i].ptr, sends[i].bytes, &h, &off);
    if (!s.ok()) return fail(s);
    std::memcpy(L.out[i].handle, h.data(), sizeof(L.out[i].handle));
    L.out[i].offset = off;
    L.out[i].bytes = sends[i].bytes;
    L.out[i].pid = static_cast<int64_t>(getpid());
    L.out[i].address = reinterpret_cast<uint64_t>(sends[i].ptr);
    cs.push_back({sends[i].peer, &L.out[i], sizeof(Placement)});
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    cr.push_back({recvs[i].peer, &L.in[i], sizeof(Placement)});
  }
  absl::Status s = control_->StartRound(lane, cs, cr, deadline);
  if (s.ok()) s = control_->WaitRound(lane, deadline);
  if (!s.ok()) return fail(s);
  for (size_t i = 0; i < recvs.size(); ++i) {
    const Placement& p = L.in[i];
    if (p.bytes != recvs[i].bytes) {
      return fail(absl::InternalError(absl::StrCat(
          "rank ", rank_, " lane ", lane, ": rank ", recvs[i].peer, " sends ", p.bytes,
          " bytes where the plan expects ", recvs[i].bytes)));
    }
    const char* from = reinterpret_cast<const char*>(p.address);
    if (p.pid != static_cast<int64_t>(getpid())) {
      absl::StatusOr<char*> base =
          Open(recvs[i].peer, std::string(p.handle, sizeof(p.handle)));
      if (!base.ok()) return fail(base.status());
      from = *base + p.offset;
    }
    s = Cuda(cudaMemcpyAsync(recvs[i].ptr, from, p.bytes, cudaMemcpyDeviceToDevice,
                             L.stream),
             "CUDA IPC copy");
    if (!s.ok()) return fail(s);
  }
  L.ack_to.clear();
  L.ack_from.clear();
  for (const RecvOp& r : recvs) L.ack_to.push_back(r.peer);
  for (const SendOp& o : sends) L.ack_from.push_back(o.peer);
  L.in_flight = true;
  return absl::OkStatus();
}

absl::Status IpcTransport::WaitRound(int32_t lane, absl::Time deadline) {
  if (lane < 0 || lane >= num_lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("lane ", lane, " out of range"));
  }
  Lane& L = *lanes_[lane];
  REFIT_RETURN_IF_ERROR(L.broken);
  if (!L.in_flight) return absl::OkStatus();
  L.in_flight = false;
  auto fail = [&L](absl::Status s) {
    L.broken = s;
    return s;
  };
  // The receiver's copies (and what the executor queued after them) are
  // done: acknowledge, so each sender may reuse what it sent from.
  if (!L.ack_to.empty()) {
    absl::Status s = SyncStream(lane, deadline, "CUDA IPC copies");
    if (!s.ok()) return fail(s);
  }
  std::vector<SendOp> as;
  std::vector<RecvOp> ar;
  L.ack_in.assign(L.ack_from.size(), 0);
  for (int32_t peer : L.ack_to) as.push_back({peer, &L.ack_out, 1});
  for (size_t i = 0; i < L.ack_from.size(); ++i) {
    ar.push_back({L.ack_from[i], &L.ack_in[i], 1});
  }
  absl::Status s = control_->StartRound(lane, as, ar, deadline);
  if (s.ok()) s = control_->WaitRound(lane, deadline);
  if (!s.ok()) return fail(s);
  return absl::OkStatus();
}

}  // namespace refit
