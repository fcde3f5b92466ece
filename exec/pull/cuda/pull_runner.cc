// PullRunner (see pull_runner.h).
#include "exec/pull/cuda/pull_runner.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
#include "exec/pull/cuda/copy_engine.h"
#include "exec/cuda/cuda_status.h"
#include "exec/pull/cuda/pull_kernels.h"
#include "exec/transport/peer_signal.h"
#include "exec/convert/cuda/pull_quantize_kernels.h"
#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/pull/cuda/fused_pull_device.h"
#include "exec/pull/fused_pull.h"
#include "exec/pull/pull_program.h"
#include "layout/dtype.h"

namespace refit {
namespace {

// Device errors are UNAVAILABLE on the pull path (pull_runner.h).
absl::Status Cuda(cudaError_t e, const std::string& what) {
  return CudaStatus(e, what, absl::StatusCode::kUnavailable);
}

// What a sender tells each receiver at prepare, before its buffers.
struct Hello {
  int64_t pid;
  uint64_t token;
  int64_t buffers;
  char device_uuid[16];  // the physical GPU of its buffers (not the ordinal:
                         // processes may number the GPUs differently)
  char signal[96];  // its PeerSignal's name
};

// A receiver's answer to the descriptions: whether it mapped them, and
// its own signal.
struct Ack {
  uint64_t ok;
  int64_t pid;
  char signal[96];
};

void CopyName(const std::string& name, char (&out)[96]) {
  std::memset(out, 0, sizeof(out));
  std::memcpy(out, name.data(), std::min(name.size(), sizeof(out) - 1));
}
std::string NameOf(const char (&in)[96]) { return std::string(in, strnlen(in, sizeof(in))); }

std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
uint64_t U64(const std::string& s) {
  uint64_t v = 0;
  std::memcpy(&v, s.data(), std::min<size_t>(8, s.size()));
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PullRunner>> PullRunner::Create(
    const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
    KvStore* store, PullRunnerOptions options, absl::Time deadline) {
  std::unique_ptr<PullRunner> e(new PullRunner());
  e->side_ = side;
  e->rank_ = rank;
  e->global_rank_ = GlobalRank(slice, side, rank);
  e->options_ = std::move(options);
  REFIT_RETURN_IF_ERROR(e->Prepare(slice, std::move(buffers), store, deadline));
  return e;
}

PullRunner::~PullRunner() {
  (void)cudaSetDevice(options_.device);
  // Copies still queued (a failed round) finish on their own; wait a
  // bounded time before the mappings go.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  std::vector<void*> streams = copy_engine_streams_;
  streams.push_back(stream_);
  for (void* s : streams) {
    if (s == nullptr) continue;
    while (cudaStreamQuery(static_cast<cudaStream_t>(s)) == cudaErrorNotReady &&
           absl::Now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  importer_.reset();
  exporter_.reset();
  conversions_.reset();
  if (items_ != nullptr) (void)cudaFree(items_);
  quant_.reset();
  if (event_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (start_event_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(start_event_));
  if (quant_event_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(quant_event_));
  for (void* e : copy_engine_events_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  for (void* e : copy_engine_streams_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(e));
  (void)cudaGetLastError();
}

int32_t PullRunner::Local(int32_t global) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), global);
  return static_cast<int32_t>(it - members_.begin());
}

void PullRunner::Cancel(const absl::Status& reason) {
  cancel_.Cancel(reason);
  if (control_ != nullptr) control_->Cancel(reason);
}

absl::Status PullRunner::CheckCancelled() { return cancel_.status(); }

absl::Status PullRunner::WaitEvent(void* event, absl::Time deadline, const char* what) {
  // Polls without sleeping for a while (a refit's copies take milliseconds:
  // a sleep's timer slack would add tens of microseconds), then sleeps.
  const absl::Time spin_until = absl::Now() + absl::Milliseconds(200);
  while (true) {
    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) {
      return Cuda(q, absl::StrCat("rank ", global_rank_, ": ", what));
    }
    REFIT_RETURN_IF_ERROR(CheckCancelled());
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", global_rank_, ": ", what, " not complete by the deadline"));
    }
    if (absl::Now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

absl::Status PullRunner::Exchange(const std::vector<int32_t>& send_to,
                                  const std::vector<std::string>& out,
                                  const std::vector<int32_t>& recv_from,
                                  std::vector<std::string>* in, absl::Time deadline) {
  std::vector<SendOp> s;
  std::vector<RecvOp> r;
  for (size_t i = 0; i < send_to.size(); ++i) {
    s.push_back({Local(send_to[i]), out[i].data(), static_cast<int64_t>(out[i].size())});
  }
  for (size_t i = 0; i < recv_from.size(); ++i) {
    r.push_back({Local(recv_from[i]), (*in)[i].data(), static_cast<int64_t>((*in)[i].size())});
  }
  REFIT_RETURN_IF_ERROR(control_->StartWave(0, s, r, deadline));
  absl::Status st = control_->WaitWave(0, deadline);
  if (!st.ok()) {
    // Say which member the control channel's rank is.
    REFIT_RETURN_IF_ERROR(CheckCancelled());
    return AnnotateStatus(st, absl::StrCat("rank ", global_rank_, " control channel (peers ",
                                           absl::StrJoin(send_to.empty() ? recv_from : send_to, ","),
                                           ", global ranks)"));
  }
  return absl::OkStatus();
}

absl::Status PullRunner::Prepare(const Plan& slice, std::vector<char*> buffers,
                                 KvStore* store, absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device),
                             absl::StrCat("cudaSetDevice(", options_.device, ")")));
  cudaDeviceProp prop;
  REFIT_RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, options_.device),
                             "cudaGetDeviceProperties"));
  static_assert(sizeof(prop.uuid.bytes) == sizeof(device_uuid_), "16-byte GPU UUID");
  std::memcpy(device_uuid_, prop.uuid.bytes, sizeof(device_uuid_));
  cudaStream_t st = nullptr;
  REFIT_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  stream_ = st;
  cudaEvent_t ev = nullptr;
  REFIT_RETURN_IF_ERROR(Cuda(cudaEventCreate(&ev), "cudaEventCreate"));
  event_ = ev;
  REFIT_RETURN_IF_ERROR(Cuda(cudaEventCreate(&ev), "cudaEventCreate"));
  start_event_ = ev;
  src_world_ = slice.src.world_size;
  const int32_t world = slice.src.world_size + slice.dst.world_size;
  for (int32_t g = 0; g < world; ++g) {
    if (g == global_rank_ || !options_.pull_peer || options_.pull_peer(g)) {
      members_.push_back(g);
    }
  }
  auto pulls = [this](int32_t g) { return !options_.pull_peer || options_.pull_peer(g); };
  const int32_t ws = slice.src.world_size;
  if (side_ == Side::kTrainer) {
    for (int32_t d : PullReceivers(slice, rank_, [&](int32_t d) { return pulls(ws + d); })) {
      peers_.push_back(ws + d);
    }
  } else {
    for (const Message& m : slice.messages) {
      if (m.dst_rank == rank_ && pulls(m.src_rank)) peers_.push_back(m.src_rank);
    }
    std::sort(peers_.begin(), peers_.end());
    peers_.erase(std::unique(peers_.begin(), peers_.end()), peers_.end());
  }
  GlooTransportOptions g;
  g.num_lanes = 1;
  g.hostname = "127.0.0.1";
  g.key_prefix = absl::StrCat(options_.key_prefix, "/control/", members_.front());
  g.connect_timeout = std::min(options_.connect_timeout,
                               std::max(absl::ZeroDuration(), deadline - absl::Now()));
  REFIT_ASSIGN_OR_RETURN(
      control_, GlooTransport::Create(store, Local(global_rank_),
                                      static_cast<int32_t>(members_.size()), g));
  REFIT_ASSIGN_OR_RETURN(signal_,
                         AnnotateStatus(PeerSignal::Create(),
                                        absl::StrCat("rank ", global_rank_, " round signal")));
  if (side_ == Side::kTrainer) {
    REFIT_RETURN_IF_ERROR(PrepareConversions(slice, &buffers));
    own_buffers_ = buffers;
    return ExportTo(slice, buffers, deadline);
  }
  return ImportFrom(slice, std::move(buffers), deadline);
}

absl::Status PullRunner::PrepareConversions(const Plan& slice, std::vector<char*>* buffers) {
  ConversionStage::Memory memory;
  memory.allocate = [](int64_t bytes) -> absl::StatusOr<char*> {
    void* p = nullptr;
    REFIT_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, std::max<int64_t>(bytes, 1)), "cudaMalloc"));
    return static_cast<char*>(p);
  };
  memory.release = [](char* p, int64_t) { (void)cudaFree(p); };
  // The conversions the plan runs in one pass (Conversion::one_pass) the
  // receivers fuse: they are not run here (nor their scratch allocated).
  const Plan* convert = &slice;
  const int32_t ws = slice.src.world_size;
  fused_ = FusableConversions(slice, rank_, [&](int32_t d) {
    return !options_.pull_peer || options_.pull_peer(ws + d);
  });
  // The fused NVFP4 conversions, numbered as *convert keeps them; of
  // those, the ones whose receivers compute the global amax.
  std::set<int32_t> global, engine_amax;
  if (!fused_.empty()) {
    KeptConversions kept = WithoutConversions(slice, fused_);
    kept_slice_ = std::make_unique<Plan>(std::move(kept.plan));
    convert = kept_slice_.get();
    global = std::move(kept.global_amax);
    const std::set<int32_t> by_engine = EngineAmaxConversions(slice, rank_, fused_);
    for (int32_t j : global) {
      if (by_engine.count(kept.from[j]) > 0) engine_amax.insert(j);
    }
  }
  REFIT_ASSIGN_OR_RETURN(
      conversions_, ConversionStage::Create(
                        *convert, rank_, [this] { return MakeCudaConvertOps(stream_); },
                        std::move(memory), buffers, global, engine_amax));
  if (conversions_ == nullptr) return absl::OkStatus();
  for (const auto& [peer, count] : conversions_->peers()) {
    if (!std::binary_search(members_.begin(), members_.end(), peer)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer rank ", rank_, " shares FP8 tiles with trainer rank ", peer,
          ", which is on another host: the pull path exchanges amaxes on one host"));
    }
  }
  return absl::OkStatus();
}

absl::Status PullRunner::Convert(absl::Time deadline) {
  // The amaxes travel over the control channel.
  auto exchange = [this, deadline](const std::map<int32_t, std::vector<float>>& sends)
      -> absl::StatusOr<std::map<int32_t, std::vector<float>>> {
    std::vector<int32_t> peers;
    std::vector<std::string> out, in;
    for (const auto& [peer, count] : conversions_->peers()) {
      peers.push_back(peer);
      const std::vector<float>& v = sends.at(peer);
      out.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      in.emplace_back(count * 4, '\0');
    }
    REFIT_RETURN_IF_ERROR(Exchange(peers, out, peers, &in, deadline));
    std::map<int32_t, std::vector<float>> received;
    for (size_t i = 0; i < peers.size(); ++i) {
      std::vector<float>& v = received[peers[i]];
      v.resize(in[i].size() / 4);
      std::memcpy(v.data(), in[i].data(), in[i].size());
    }
    return received;
  };
  return conversions_->Run(own_buffers_, exchange);
}

absl::Status PullRunner::ExportTo(const Plan& slice, const std::vector<char*>& buffers,
                                  absl::Time deadline) {
  exporter_ = std::make_unique<MemoryExporter>();
  const int32_t ws = slice.src.world_size;
  std::vector<std::string> blobs;
  for (int32_t g : peers_) {
    const std::vector<int32_t> order = ExportedSourceBuffers(slice, rank_, g - ws, fused_);
    Hello h{static_cast<int64_t>(getpid()), ProcessToken(),
            static_cast<int64_t>(order.size()), {}, {}};
    std::memcpy(h.device_uuid, device_uuid_, sizeof(h.device_uuid));
    CopyName(signal_->name(), h.signal);
    std::string blob(reinterpret_cast<const char*>(&h), sizeof(h));
    for (int32_t b : order) {
      if (b < 0 || b >= static_cast<int32_t>(buffers.size()) || buffers[b] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trainer rank ", rank_, ": the plan reads buffer ", b, " (",
            b >= 0 && b < static_cast<int32_t>(slice.src.buffers.size())
                ? slice.src.buffers[b].name : "?",
            "), which was not given"));
      }
      const Plan& sizes = kept_slice_ != nullptr ? *kept_slice_ : slice;
      REFIT_RETURN_IF_ERROR(AnnotateStatus(
          exporter_->Export(buffers[b], sizes.src.buffers[b].byte_size, &blob),
          absl::StrCat("trainer rank ", rank_, " buffer ", slice.src.buffers[b].name)));
    }
    // What the receiver quantizes on pull.
    const std::vector<FusedSource> fs = FusedSourcesOf(slice, rank_, g - ws, fused_);
    blob += U64(fs.size());
    blob.append(reinterpret_cast<const char*>(fs.data()), fs.size() * sizeof(FusedSource));
    blobs.push_back(std::move(blob));
  }
  for (const Message& m : slice.messages) {
    if (m.src_rank == rank_ &&
        std::binary_search(peers_.begin(), peers_.end(), ws + m.dst_rank)) {
      bytes_ += m.bytes;
    }
  }
  std::vector<std::string> sizes;
  for (const std::string& b : blobs) sizes.push_back(U64(b.size()));
  std::vector<std::string> none;
  REFIT_RETURN_IF_ERROR(Exchange(peers_, sizes, {}, &none, deadline));
  REFIT_RETURN_IF_ERROR(Exchange(peers_, blobs, {}, &none, deadline));
  // Every receiver mapped what it needs (or failed): its answer.
  std::vector<std::string> acks(peers_.size(), std::string(sizeof(Ack), '\0'));
  REFIT_RETURN_IF_ERROR(Exchange({}, {}, peers_, &acks, deadline));
  absl::Status opened = absl::OkStatus();
  std::vector<int32_t> waiting;  // receivers that mapped, waiting for the answer below
  for (size_t i = 0; i < peers_.size(); ++i) {
    Ack a;
    std::memcpy(&a, acks[i].data(), sizeof(a));
    if (a.ok != 1) {
      if (opened.ok()) {
        opened = absl::UnavailableError(absl::StrCat(
            "rank ", global_rank_, ": receiver rank ", peers_[i],
            " could not map this member's buffers (its own error says why)"));
      }
      continue;
    }
    waiting.push_back(peers_[i]);
    if (!opened.ok()) continue;
    absl::StatusOr<std::unique_ptr<PeerSignal>> sig = PeerSignal::Open(NameOf(a.signal), a.pid);
    if (!sig.ok()) {
      opened = AnnotateStatus(sig.status(), absl::StrCat("rank ", global_rank_,
                                                         ": receiver rank ", peers_[i],
                                                         "'s round signal"));
      continue;
    }
    peer_signals_.push_back(*std::move(sig));
  }
  // Every peer has opened this member's signal: its name can go. The
  // receivers learn whether theirs were opened, and remove theirs.
  signal_->Unlink();
  std::vector<std::string> answer(waiting.size(), U64(opened.ok() ? 1 : 0));
  REFIT_RETURN_IF_ERROR(Exchange(waiting, answer, {}, &none, deadline));
  return opened;
}

absl::Status PullRunner::ImportFrom(const Plan& slice, std::vector<char*> buffers,
                                    absl::Time deadline) {
  importer_ = std::make_unique<MemoryImporter>(options_.device);
  std::vector<std::string> sizes(peers_.size(), std::string(8, '\0'));
  REFIT_RETURN_IF_ERROR(Exchange({}, {}, peers_, &sizes, deadline));
  std::vector<std::string> blobs;
  for (const std::string& s : sizes) {
    const uint64_t n = U64(s);
    if (n < sizeof(Hello) || n > (1ull << 34)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", global_rank_, ": a sender announces ", n, " bytes of buffer descriptions"));
    }
    blobs.emplace_back(n, '\0');
  }
  REFIT_RETURN_IF_ERROR(Exchange({}, {}, peers_, &blobs, deadline));
  absl::Status mapped = absl::OkStatus();
  for (size_t i = 0; i < blobs.size() && mapped.ok(); ++i) {
    Hello h;
    std::memcpy(&h, blobs[i].data(), sizeof(h));
    absl::StatusOr<std::unique_ptr<PeerSignal>> sig = PeerSignal::Open(NameOf(h.signal), h.pid);
    if (!sig.ok()) {
      mapped = AnnotateStatus(sig.status(), absl::StrCat("engine rank ", rank_, ": trainer rank ",
                                                         peers_[i], "'s round signal"));
    } else {
      peer_signals_.push_back(*std::move(sig));
    }
  }
  REFIT_ASSIGN_OR_RETURN(PullProgram program,
                         BuildPullProgram(slice, rank_, [&](int32_t s) {
                           return std::binary_search(peers_.begin(), peers_.end(), s);
                         }));
  std::vector<char*> src(slice.src.buffers.size(), nullptr);
  std::map<int32_t, std::vector<FusedSource>> fused;
  for (size_t i = 0; i < program.peers.size() && mapped.ok(); ++i) {
    const PullPeer& peer = program.peers[i];
    const std::string who = absl::StrCat("engine rank ", rank_, " mapping trainer rank ",
                                         peer.src_rank, "'s memory");
    const std::string& blob = blobs[i];
    Hello h;
    std::memcpy(&h, blob.data(), sizeof(h));
    if (h.buffers != static_cast<int64_t>(peer.buffers.size())) {
      mapped = absl::InvalidArgumentError(absl::StrCat(
          who, ": it describes ", h.buffers, " buffers, the plan reads ",
          peer.buffers.size(), " (the two members hold different plans)"));
      break;
    }
    const char* p = blob.data() + sizeof(h);
    size_t left = blob.size() - sizeof(h);
    for (int32_t b : peer.buffers) {
      absl::StatusOr<char*> a = importer_->Import(&p, &left, h.pid, h.token, who);
      if (!a.ok()) {
        mapped = a.status();
        break;
      }
      src[b] = *a;
    }
    uint64_t count = 0;
    if (mapped.ok() && left >= 8) {
      std::memcpy(&count, p, 8);
      p += 8;
      left -= 8;
    }
    if (mapped.ok() && (count > left / sizeof(FusedSource) || left != count * sizeof(FusedSource))) {
      mapped = absl::InvalidArgumentError(absl::StrCat(
          who, ": ", left, " bytes of quantize-on-pull descriptions for ", count, " entries"));
    }
    if (mapped.ok() && count > 0) {
      std::vector<FusedSource>& v = fused[peer.src_rank];
      v.resize(count);
      std::memcpy(v.data(), p, count * sizeof(FusedSource));
    }
  }
  FusedProgram quant;
  if (mapped.ok()) {
    absl::StatusOr<FusedProgram> fp = BuildFusedItems(slice, rank_, fused);
    if (fp.ok()) {
      quant = *std::move(fp);
    } else {
      mapped = fp.status();
    }
  }
  // The fused conversions' scratch is not pulled: the items write it.
  program.tasks.erase(std::remove_if(program.tasks.begin(), program.tasks.end(),
                                     [&](const CopyTask& t) {
                                       return quant.fused_buffers.count(t.src_buffer) > 0;
                                     }),
                      program.tasks.end());
  // Tasks reading a sender on another GPU (its Hello names the GPU) go to
  // the copy engines.
  std::vector<bool> remote(slice.src.buffers.size(), false);
  for (size_t i = 0; i < program.peers.size() && i < blobs.size(); ++i) {
    Hello h;
    std::memcpy(&h, blobs[i].data(), sizeof(h));
    if (std::memcmp(h.device_uuid, device_uuid_, sizeof(device_uuid_)) == 0) continue;
    for (int32_t b : program.peers[i].buffers) {
      if (b >= 0 && static_cast<size_t>(b) < remote.size()) remote[b] = true;
    }
  }
  std::vector<CopyTask> local_tasks, remote_tasks;
  for (const CopyTask& t : program.tasks) {
    const bool far = t.src_buffer >= 0 && static_cast<size_t>(t.src_buffer) < remote.size() &&
                     remote[t.src_buffer];
    (far ? remote_tasks : local_tasks).push_back(t);
  }
  std::vector<ResolvedCopy> copies;
  if (mapped.ok()) {
    absl::StatusOr<std::vector<ResolvedCopy>> rc =
        ResolveTasks(local_tasks, src, buffers, nullptr, nullptr);
    absl::StatusOr<std::vector<ResolvedCopy>> rr =
        ResolveTasks(remote_tasks, src, buffers, nullptr, nullptr);
    if (rc.ok() && rr.ok()) {
      copies = std::move(*rc);
      // As few copy-engine operations as the copies make (each costs the
      // copy engine a start-up); one stays inside one allocation on each side.
      std::vector<int64_t> allocations;
      for (const CopyTask& t : remote_tasks) {
        allocations.push_back((int64_t{t.src_buffer} << 32) | static_cast<uint32_t>(t.dst_buffer));
      }
      const std::vector<ResolvedCopy> joined = JoinForCopyEngine(*rr, allocations);
      num_copy_engine_copies_ = static_cast<int64_t>(joined.size());
      for (const ResolvedCopy& c : joined) copy_engine_bytes_ += c.rows * c.row_bytes;
      if (!joined.empty()) copy_engine_copies_ = SpreadCopies(joined, kPeerCopyStreams);
    } else {
      mapped = AnnotateStatus(rc.ok() ? rr.status() : rc.status(),
                              absl::StrCat("engine rank ", rank_));
    }
  }
  for (size_t i = 0; i < copy_engine_copies_.size() && mapped.ok(); ++i) {
    cudaStream_t es = nullptr;
    mapped = Cuda(cudaStreamCreateWithFlags(&es, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!mapped.ok()) break;
    copy_engine_streams_.push_back(es);
    cudaEvent_t ee = nullptr;
    mapped = Cuda(cudaEventCreateWithFlags(&ee, cudaEventDisableTiming), "cudaEventCreate");
    if (mapped.ok()) copy_engine_events_.push_back(ee);
  }
  const std::vector<cuda::PullItem> items =
      cuda::SplitPullItems(copies, kPullItemBytes);
  if (mapped.ok() && items.size() >= (1ull << 31)) {
    mapped = absl::ResourceExhaustedError("more than 2^31 pull work items");
  }
  if (mapped.ok() && !items.empty()) {
    mapped = Cuda(cudaMalloc(&items_, items.size() * sizeof(cuda::PullItem)), "cudaMalloc");
    if (mapped.ok()) {
      mapped = Cuda(cudaMemcpy(items_, items.data(), items.size() * sizeof(cuda::PullItem),
                               cudaMemcpyHostToDevice),
                    "cudaMemcpy");
    }
  }
  if (mapped.ok() && !quant.items.empty()) {
    std::map<int32_t, std::vector<char*>> by_rank;
    for (const FusedItem& it : quant.items) by_rank[it.src_rank] = src;
    absl::StatusOr<std::unique_ptr<FusedPullDevice>> q =
        FusedPullDevice::Create(slice, quant, by_rank, buffers);
    if (q.ok()) {
      quant_ = *std::move(q);
    } else {
      mapped = AnnotateStatus(q.status(), absl::StrCat("engine rank ", rank_));
    }
  }
  if (mapped.ok() && quant_ != nullptr && quant_->num_engine_amaxes() > 0 &&
      !copy_engine_copies_.empty()) {
    cudaEvent_t qe = nullptr;
    mapped = Cuda(cudaEventCreateWithFlags(&qe, cudaEventDisableTiming), "cudaEventCreate");
    quant_event_ = qe;
  }
  num_items_ = static_cast<int64_t>(items.size());
  bytes_ = program.bytes;
  own_buffers_ = std::move(buffers);
  Ack ack{mapped.ok() ? 1u : 0u, static_cast<int64_t>(getpid()), {}};
  CopyName(signal_->name(), ack.signal);
  std::vector<std::string> acks(peers_.size(),
                                std::string(reinterpret_cast<const char*>(&ack), sizeof(ack)));
  std::vector<std::string> none;
  REFIT_RETURN_IF_ERROR(Exchange(peers_, acks, {}, &none, deadline));
  REFIT_RETURN_IF_ERROR(mapped);
  // Every sender opened this member's signal (or says it could not).
  std::vector<std::string> opened(peers_.size(), std::string(8, '\0'));
  REFIT_RETURN_IF_ERROR(Exchange({}, {}, peers_, &opened, deadline));
  signal_->Unlink();
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (U64(opened[i]) != 1) {
      return absl::UnavailableError(absl::StrCat(
          "engine rank ", rank_, ": trainer rank ", peers_[i],
          " could not open this member's round signal (its own error says why)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PullRunner::WaitPeers(absl::Time deadline) {
  const uint64_t want = PeerSignal::Encode(round_, false);
  for (size_t i = 0; i < peer_signals_.size(); ++i) {
    const std::string who = peers_[i] < src_world_
                                ? absl::StrCat("trainer rank ", peers_[i])
                                : absl::StrCat("engine rank ", peers_[i] - src_world_);
    REFIT_ASSIGN_OR_RETURN(
        uint64_t v, AnnotateStatus(peer_signals_[i]->WaitAtLeast(want, deadline, cancel_, who),
                                   absl::StrCat("rank ", global_rank_, " round ", round_)));
    if (v == PeerSignal::Encode(round_, true)) {
      return absl::UnavailableError(absl::StrCat("rank ", global_rank_, ": ", who,
                                                 " failed round ", round_,
                                                 " (its own error says why)"));
    }
    if (v > PeerSignal::Encode(round_, true)) {
      return absl::InternalError(absl::StrCat("rank ", global_rank_, ": ", who, " is at round ",
                                              v >> 1, ", this member at ", round_));
    }
  }
  return absl::OkStatus();
}

absl::Status PullRunner::RunSender(absl::Time deadline) {
  cudaEvent_t ev = static_cast<cudaEvent_t>(event_);
  cudaStream_t ready = options_.ready_stream != nullptr
                           ? static_cast<cudaStream_t>(options_.ready_stream)
                           : cudaStreamLegacy;
  REFIT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev, ready), "cudaEventRecord"));
  REFIT_RETURN_IF_ERROR(WaitEvent(event_, deadline, "the trainer's writes to its weights"));
  // The engine's dtypes (FP8, f32 -exp) into the scratch buffers first.
  if (conversions_ != nullptr) REFIT_RETURN_IF_ERROR(Convert(deadline));
  signal_->Publish(PeerSignal::Encode(round_, false));  // version round_ in place
  return WaitPeers(deadline);                            // every receiver done
}

absl::Status PullRunner::RunReceiver(absl::Time deadline, RunStats* stats) {
  REFIT_RETURN_IF_ERROR(WaitPeers(deadline));  // every sender's version in place
  cudaEvent_t ev = static_cast<cudaEvent_t>(event_);
  cudaStream_t st = static_cast<cudaStream_t>(stream_);
  REFIT_RETURN_IF_ERROR(
      Cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_event_), st), "cudaEventRecord"));
  // The quantizing items first: those that compute NVFP4 global amaxes
  // write the global scales the copies then read.
  if (quant_ != nullptr) REFIT_RETURN_IF_ERROR(quant_->Launch(st));
  if (quant_event_ != nullptr) {
    REFIT_RETURN_IF_ERROR(
        Cuda(cudaEventRecord(static_cast<cudaEvent_t>(quant_event_), st), "cudaEventRecord"));
  }
  REFIT_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(cuda::LaunchPull(
                                 static_cast<const cuda::PullItem*>(items_), num_items_, st,
                                 options_.receive_blocks)),
                             "pull kernel launch"));
  if (!copy_engine_copies_.empty()) {
    // The copy engines read the other GPUs alongside the kernels; after
    // the quantizing items where those write global scales they copy.
    for (size_t i = 0; quant_event_ != nullptr && i < copy_engine_streams_.size(); ++i) {
      REFIT_RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(copy_engine_streams_[i]),
                                                     static_cast<cudaEvent_t>(quant_event_), 0),
                                 "cudaStreamWaitEvent"));
    }
    REFIT_RETURN_IF_ERROR(EnqueueCopyEngine(copy_engine_copies_, copy_engine_streams_));
    for (size_t i = 0; i < copy_engine_streams_.size(); ++i) {
      cudaStream_t es = static_cast<cudaStream_t>(copy_engine_streams_[i]);
      cudaEvent_t ee = static_cast<cudaEvent_t>(copy_engine_events_[i]);
      REFIT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ee, es), "cudaEventRecord"));
      REFIT_RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(st, ee, 0), "cudaStreamWaitEvent"));
    }
  }
  REFIT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev, st), "cudaEventRecord"));
  REFIT_RETURN_IF_ERROR(WaitEvent(event_, deadline, "the pull kernel"));
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_event_), ev) == cudaSuccess) {
    stats->device_seconds = ms / 1e3;
  }
  if (quant_ != nullptr) REFIT_RETURN_IF_ERROR(quant_->Check(rank_));
  signal_->Publish(PeerSignal::Encode(round_, false));  // done with version round_
  return absl::OkStatus();
}

absl::StatusOr<RunStats> PullRunner::Run(absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckCancelled());
  const absl::Time start = absl::Now();
  REFIT_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "cudaSetDevice"));
  ++round_;
  RunStats stats;
  stats.waves = 1;
  // Either way, the peers learn of this member's failure at once.
  absl::Status s = side_ == Side::kTrainer ? RunSender(deadline) : RunReceiver(deadline, &stats);
  if (!s.ok()) {
    signal_->Publish(PeerSignal::Encode(round_, true));
    return s;
  }
  if (side_ == Side::kTrainer) {
    stats.bytes_sent = bytes_;
  } else {
    stats.bytes_received = bytes_;
  }
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // No staging: only a converting sender's scratch and workspace.
  stats.peak_staging_bytes =
      conversions_ != nullptr ? conversions_->scratch_bytes() + conversions_->workspace_bytes() : 0;
  return stats;
}

}  // namespace refit
