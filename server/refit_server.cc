// refitd's service implementation on gRPC's callback API. All state lives
// behind one mutex; handlers never block: waits (AwaitPlan, KvGet with wait)
// park a reactor that is finished when the condition holds, and one
// housekeeping thread builds plans, expires waits and heartbeats, and times
// out rounds.
#include "server/refit_server.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "layout/dtype.h"
#include "proto/protocol_version.h"
#include "proto/refit_service.grpc.pb.h"
#include "server/credentials.h"

namespace refit {
namespace {

using v1::Registration;

constexpr int64_t kMaxElements = int64_t{1} << 50;

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  size_t colon = address.rfind(':');
  if (colon != std::string::npos) host = address.substr(0, colon);
  if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

std::string MemberKey(const v1::MemberIdentity& id) {
  if (id.side() == v1::SIDE_TRAINER) {
    return absl::StrCat("trainer/", id.job(), "/", id.rank());
  }
  return absl::StrCat("engine/", id.job(), "/", id.engine_id(), "/", id.rank());
}

std::string Describe(const v1::MemberIdentity& id) {
  if (id.side() == v1::SIDE_TRAINER) return absl::StrCat("trainer rank ", id.rank());
  return absl::StrCat("engine ", id.engine_id(), " rank ", id.rank());
}

std::string Serialize(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace

absl::Status CheckDataPlane(const std::vector<Registration>& trainer,
                            const std::vector<Registration>& engine) {
  std::vector<const v1::MemberIdentity*> all;
  for (const auto* side : {&trainer, &engine}) {
    for (const Registration& r : *side) all.push_back(&r.identity());
  }
  // One transport for everyone: members that disagree would wait for each
  // other on different wires until their deadlines.
  const v1::MemberIdentity* first = nullptr;
  for (const v1::MemberIdentity* id : all) {
    if (id->transport().empty()) continue;
    if (first == nullptr) {
      first = id;
    } else if (id->transport() != first->transport()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(*first), " uses the ", first->transport(), " data plane and ",
          Describe(*id), " the ", id->transport(),
          " one: every member of a job must use the same transport"));
    }
  }
  const bool ipc = first != nullptr && first->transport() == "ipc";
  if (ipc) {
    for (const v1::MemberIdentity* id : all) {
      if (id->host_id() != first->host_id()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the ipc data plane (CUDA IPC) connects the processes of one host, but ",
            Describe(*first), " is on ", first->host_id(), " and ", Describe(*id),
            " on ", id->host_id()));
      }
    }
    return absl::OkStatus();  // several members on one GPU are what it is for
  }
  std::map<std::string, const v1::MemberIdentity*> by_gpu;
  for (const v1::MemberIdentity* id : all) {
    if (id->device_uuid().empty()) continue;
    auto [it, fresh] = by_gpu.emplace(id->device_uuid(), id);
    if (fresh) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        Describe(*it->second), " (", it->second->device(), ") and ", Describe(*id),
        " (", id->device(), ") on host ", id->host_id(), " are on the same GPU ",
        id->device_uuid(),
        ": NCCL connects one rank per GPU, so a trainer and an engine sharing "
        "GPUs (colocated) cannot refit over it; give each member its own GPU, "
        "or use the CUDA IPC data plane (transport \"ipc\") on one host"));
  }
  return absl::OkStatus();
}

absl::Status CheckProtocolVersion(const Registration& reg) {
  const uint32_t v = reg.protocol_version();
  if (v == kProtocolVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "protocol_version: member ", Describe(reg.identity()), " speaks ",
      v == 0 ? std::string("no refit protocol version (a client library from "
                           "before versions were sent)")
             : absl::StrCat("refit protocol ", v),
      ", this refitd speaks ", kProtocolVersion,
      ": run refitd and the client library from the same refit release"));
}

absl::Status ValidateRegistration(const Registration& reg, int max_buffers,
                                  int64_t max_metadata_bytes) {
  auto bad = [](std::string msg) { return absl::InvalidArgumentError(msg); };
  const int64_t size = static_cast<int64_t>(reg.ByteSizeLong());
  if (size > max_metadata_bytes) {
    return bad(absl::StrCat("registration: ", size,
                            " bytes of metadata exceed the limit of ",
                            max_metadata_bytes));
  }
  const auto& id = reg.identity();
  if (id.side() != v1::SIDE_TRAINER && id.side() != v1::SIDE_ENGINE) {
    return bad("identity.side: must be SIDE_TRAINER or SIDE_ENGINE");
  }
  if (id.job().empty()) return bad("identity.job: empty");
  if (id.side() == v1::SIDE_ENGINE && id.engine_id().empty()) {
    return bad("identity.engine_id: empty for an engine member");
  }
  if (id.world_size() <= 0) {
    return bad(absl::StrCat("identity.world_size: ", id.world_size(),
                            " is not positive"));
  }
  if (id.rank() < 0 || id.rank() >= id.world_size()) {
    return bad(absl::StrCat("identity.rank: ", id.rank(),
                            " is outside [0, world_size=", id.world_size(), ")"));
  }
  if (reg.buffers_size() > max_buffers) {
    return bad(absl::StrCat("buffers: ", reg.buffers_size(),
                            " buffers exceed the limit of ", max_buffers));
  }
  std::set<std::string> names;
  for (int i = 0; i < reg.buffers_size(); ++i) {
    const auto& b = reg.buffers(i);
    const std::string where = absl::StrCat("buffers[", i, "] (", b.name(), ")");
    if (b.name().empty()) return bad(absl::StrCat("buffers[", i, "].name: empty"));
    if (!names.insert(b.name()).second) {
      return bad(absl::StrCat(where, ".name: duplicate buffer name"));
    }
    if (!IsValidDType(b.dtype())) {
      return bad(absl::StrCat(where, ".dtype: unknown dtype ", b.dtype()));
    }
    int64_t elements = 1;
    for (int d = 0; d < b.shape_size(); ++d) {
      const int64_t s = b.shape(d);
      if (s < 0) {
        return bad(absl::StrCat(where, ".shape[", d, "]: negative size ", s));
      }
      if (s > 0 && elements > kMaxElements / s) {
        return bad(absl::StrCat(where, ".shape[", d, "]: shape overflows"));
      }
      elements *= s;
    }
    const int64_t esize = DTypeSize(static_cast<DType>(b.dtype()));
    if (elements > kMaxElements / std::max<int64_t>(esize, 1)) {
      return bad(absl::StrCat(where, ".shape: byte size overflows"));
    }
    if (b.byte_size() != elements * esize) {
      return bad(absl::StrCat(where, ".byte_size: ", b.byte_size(),
                              " disagrees with shape x dtype = ",
                              elements * esize));
    }
  }
  for (int i = 0; i < reg.records_size(); ++i) {
    const auto& r = reg.records(i);
    if (r.tensor() < 0 || r.tensor() >= reg.tensors_size()) {
      return bad(absl::StrCat("records[", i, "].tensor: ", r.tensor(),
                              " is not a tensor index"));
    }
    if (r.buffer() < 0 || r.buffer() >= reg.buffers_size()) {
      return bad(absl::StrCat("records[", i, "].buffer: ", r.buffer(),
                              " is not a buffer index"));
    }
  }
  return absl::OkStatus();
}

std::string FingerprintRegistrations(const std::vector<const Registration*>& regs) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const Registration* r : regs) mix(Serialize(*r));
  return absl::StrFormat("%016x", h);
}

// ---------------------------------------------------------------------------

class RefitServer::Impl final : public v1::RefitService::CallbackService {
 public:
  explicit Impl(Options options) : options_(std::move(options)) {}

  absl::Status Init();
  void Shutdown();
  int port() const { return port_; }

  // --- reactors -----------------------------------------------------------
  class WaitReactor : public grpc::ServerUnaryReactor {
   public:
    explicit WaitReactor(Impl* impl) : impl_(impl) {}
    void OnCancel() override { impl_->CancelWaiter(this); }
    void OnDone() override { delete this; }

   private:
    Impl* impl_;
  };

  class Watcher : public grpc::ServerWriteReactor<v1::RoundEvent> {
   public:
    Watcher(Impl* impl, std::string member_id)
        : impl_(impl), member_id_(std::move(member_id)) {}
    const std::string& member_id() const { return member_id_; }

    // Queues an event; safe to call with the server mutex held.
    void Push(v1::RoundEvent event) {
      const v1::RoundEvent* start = nullptr;
      {
        absl::MutexLock l(&mu_);
        if (finishing_) return;
        // A queued PLAN_CHANGED not yet being written is superseded by a
        // newer one: a slow reader gets the newest epoch, not a backlog.
        if (event.kind() == v1::RoundEvent::PLAN_CHANGED && queue_.size() >= 2 &&
            queue_.back().kind() == v1::RoundEvent::PLAN_CHANGED) {
          queue_.back() = std::move(event);
          return;
        }
        queue_.push_back(std::move(event));
        if (!writing_) {
          writing_ = true;
          start = &queue_.front();
        }
      }
      if (start != nullptr) StartWrite(start);
    }

    // Ends the stream after pending writes.
    void End(grpc::Status status) {
      bool finish_now = false;
      {
        absl::MutexLock l(&mu_);
        if (finishing_) return;
        finishing_ = true;
        end_status_ = status;
        finish_now = !writing_;
      }
      if (finish_now) Finish(status);
    }

    void OnWriteDone(bool ok) override {
      const v1::RoundEvent* next = nullptr;
      bool finish = false;
      grpc::Status st;
      {
        absl::MutexLock l(&mu_);
        queue_.pop_front();
        if (!ok) {
          finishing_ = true;
          queue_.clear();
        }
        if (!queue_.empty()) {
          next = &queue_.front();
        } else {
          writing_ = false;
          if (finishing_) {
            finish = true;
            st = end_status_;
          }
        }
      }
      if (next != nullptr) {
        StartWrite(next);
      } else if (finish) {
        Finish(st);
      }
    }

    void OnCancel() override {
      impl_->WatcherGone(this, "its stream dropped");
      End(grpc::Status::CANCELLED);
    }
    void OnDone() override {
      impl_->WatcherGone(this, "");
      delete this;
    }

   private:
    Impl* impl_;
    std::string member_id_;
    absl::Mutex mu_;
    std::deque<v1::RoundEvent> queue_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool finishing_ ABSL_GUARDED_BY(mu_) = false;
    grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  };

  // --- RPCs ---------------------------------------------------------------
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* AwaitPlan(grpc::CallbackServerContext* ctx,
                                      const v1::AwaitPlanRequest* req,
                                      v1::AwaitPlanResponse* resp) override;
  grpc::ServerUnaryReactor* StartRound(grpc::CallbackServerContext* ctx,
                                       const v1::StartRoundRequest* req,
                                       v1::StartRoundResponse* resp) override;
  grpc::ServerWriteReactor<v1::RoundEvent>* WatchRounds(
      grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) override;
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const v1::LeaveRequest* req,
                                  v1::LeaveResponse* resp) override;
  grpc::ServerUnaryReactor* CurrentVersion(
      grpc::CallbackServerContext* ctx, const v1::CurrentVersionRequest* req,
      v1::CurrentVersionResponse* resp) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* ctx,
                                  const v1::KvSetRequest* req,
                                  v1::KvSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx,
                                  const v1::KvGetRequest* req,
                                  v1::KvGetResponse* resp) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::StatusRequest* req,
                                      v1::StatusResponse* resp) override;

  void CancelWaiter(WaitReactor* r);
  void WatcherGone(Watcher* w, const std::string& why);

 private:
  struct Member {
    std::string id;
    Registration reg;
    std::string serialized;
    absl::Time last_heartbeat;
  };
  struct Waiter {
    enum Kind { kPlan, kKv } kind;
    std::string member_id;
    int64_t min_epoch = 0;
    v1::AwaitPlanResponse* plan_resp = nullptr;
    std::string key;
    v1::KvGetResponse* kv_resp = nullptr;
    absl::Time deadline;
  };
  struct ActiveRound {
    int64_t version = 0;
    absl::Time started;
    std::set<std::string> participants;
    std::set<std::string> done;
    int64_t bytes = 0;
    double seconds = 0;
  };

  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                                 const absl::Status& s) {
    auto* r = ctx->DefaultReactor();
    r->Finish(ToGrpcStatus(s));
    return r;
  }
  absl::Time WaitDeadline(grpc::CallbackServerContext* ctx) const;

  void Housekeeping();
  void MembershipChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnnounceEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Broadcast(const v1::RoundEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndRound(bool committed, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveMember(const std::string& id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TrySatisfy(WaitReactor* r, Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeWaiters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The complete membership for a plan; false if not complete.
  bool CompleteMembership(std::vector<const Member*>* trainer,
                          std::vector<const Member*>* engine) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Options options_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread housekeeper_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  std::map<WaitReactor*, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);

  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped on membership change
  bool epoch_announce_pending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_change_ ABSL_GUARDED_BY(mu_);   // last membership change
  absl::Time dirty_since_ ABSL_GUARDED_BY(mu_);   // first change not planned
  bool plan_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool plan_incomplete_ ABSL_GUARDED_BY(mu_) = true;
  int64_t plan_epoch_ ABSL_GUARDED_BY(mu_) = -1;  // epoch of the plan below
  absl::Status plan_status_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("no plan yet");
  std::string plan_fingerprint_ ABSL_GUARDED_BY(mu_);
  // The current plan, shared with the cache (slices are not copied per
  // member: a response gets its member's slice when it is sent).
  using PlanEntry = std::shared_ptr<const absl::StatusOr<BuiltPlan>>;
  struct MemberPlan {
    v1::AwaitPlanResponse head;  // without the slice
    bool trainer = false;
    size_t index = 0;  // into the plan's trainer_slices / engine_slices
  };
  PlanEntry current_plan_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, MemberPlan> plan_slices_ ABSL_GUARDED_BY(mu_);
  // By registrations fingerprint; oldest first in plan_cache_order_.
  struct CachedPlan {
    PlanEntry plan;
    int64_t bytes = 0;
  };
  std::map<std::string, CachedPlan> plan_cache_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> plan_cache_order_ ABSL_GUARDED_BY(mu_);
  int64_t plan_cache_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  void CachePlan(const std::string& fp, PlanEntry plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<ActiveRound> round_ ABSL_GUARDED_BY(mu_);
  int64_t last_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, absl::Status> outcomes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> engine_version_ ABSL_GUARDED_BY(mu_);
  // Engines an aborted round may have written part of: engine id -> round.
  std::map<std::string, int64_t> engine_torn_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::RoundSummary> history_ ABSL_GUARDED_BY(mu_);
};

absl::Status RefitServer::Impl::Init() {
  if (!options_.plan_function) {
    return absl::InvalidArgumentError("options.plan_function: not set");
  }
  if (options_.tls == nullptr && !IsLoopbackAddress(options_.address) &&
      !options_.allow_insecure_non_loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.address: insecure listener on non-loopback address ",
        options_.address, " needs TLS or allow_insecure_non_loopback"));
  }
  REFIT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                         MakeServerCredentials(options_.tls.get(), options_.bearer_token));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.address, creds, &port_);
  builder.RegisterService(this);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(options_.max_metadata_bytes + (1 << 20),
                                         INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.address));
  }
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  housekeeper_ = std::thread([this] { Housekeeping(); });
  return absl::OkStatus();
}

void RefitServer::Impl::Shutdown() {
  std::vector<Watcher*> watchers;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [r, w] : waiters_) {
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "refitd shutting down"));
    }
    waiters_.clear();
    for (auto& [id, w] : watchers_) {
      w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "refitd shutting down"));
    }
  }
  if (housekeeper_.joinable()) housekeeper_.join();
  if (server_ != nullptr) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
}

absl::Time RefitServer::Impl::WaitDeadline(grpc::CallbackServerContext* ctx) const {
  absl::Time cap = absl::Now() + options_.max_wait;
  absl::Time d = absl::FromChrono(ctx->deadline());
  return std::min(cap, d);
}

// --- membership -------------------------------------------------------------

bool RefitServer::Impl::CompleteMembership(std::vector<const Member*>* trainer,
                                           std::vector<const Member*>* engine) const {
  std::map<std::string, std::vector<const Member*>> engines;
  int trainer_world = -1;
  for (const auto& [id, m] : members_) {
    const auto& ident = m.reg.identity();
    if (ident.side() == v1::SIDE_TRAINER) {
      trainer->push_back(&m);
      trainer_world = ident.world_size();
    } else {
      engines[ident.engine_id()].push_back(&m);
    }
  }
  if (trainer_world <= 0 || static_cast<int>(trainer->size()) != trainer_world) {
    return false;
  }
  auto by_rank = [](const Member* a, const Member* b) {
    return a->reg.identity().rank() < b->reg.identity().rank();
  };
  std::sort(trainer->begin(), trainer->end(), by_rank);
  int complete = 0;
  for (auto& [eid, ms] : engines) {
    if (static_cast<int>(ms.size()) != ms[0]->reg.identity().world_size()) continue;
    std::sort(ms.begin(), ms.end(), by_rank);
    engine->insert(engine->end(), ms.begin(), ms.end());
    ++complete;
  }
  return complete >= options_.min_engines;
}

void RefitServer::Impl::MembershipChanged() {
  ++epoch_;
  const absl::Time now = absl::Now();
  if (!plan_dirty_) dirty_since_ = now;
  last_change_ = now;
  plan_dirty_ = true;
  // Announced by the next housekeeping tick (<= 10 ms): a burst of N
  // registrations costs one broadcast per tick, not N broadcasts to N
  // streams. Until then StartRound and AwaitPlan see plan_dirty_.
  epoch_announce_pending_ = true;
}

void RefitServer::Impl::AnnounceEpoch() {
  if (!epoch_announce_pending_) return;
  epoch_announce_pending_ = false;
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::PLAN_CHANGED);
  e.set_epoch(epoch_);
  Broadcast(e);
}

void RefitServer::Impl::Broadcast(const v1::RoundEvent& e) {
  for (auto& [id, w] : watchers_) w->Push(e);
}

void RefitServer::Impl::RemoveMember(const std::string& id, const std::string& why) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  if (round_ != nullptr && round_->participants.count(id)) {
    EndRound(false, absl::StrCat("member ", Describe(it->second.reg.identity()),
                                 " ", why));
  }
  members_.erase(it);
  // The member's round stream ends with the reason, so a member that is
  // still alive (a long pause, a network partition) learns at once that it
  // is out instead of waiting for rounds it is no longer part of.
  auto w = watchers_.find(id);
  if (w != watchers_.end()) {
    Watcher* watcher = w->second;
    watchers_.erase(w);
    watcher->End(grpc::Status(grpc::StatusCode::NOT_FOUND,
                              absl::StrCat("refitd removed member ", id, ": ", why)));
  }
  MembershipChanged();
}

void RefitServer::Impl::EndRound(bool committed, const std::string& reason) {
  if (round_ == nullptr) return;
  const double secs = absl::ToDoubleSeconds(absl::Now() - round_->started);
  v1::RoundSummary s;
  s.set_version(round_->version);
  s.set_outcome(committed ? "committed" : "aborted");
  s.set_reason(reason);
  s.set_bytes(round_->bytes);
  s.set_seconds(committed ? round_->seconds : secs);
  // Each byte is counted by its sender and its receiver.
  const double moved = static_cast<double>(round_->bytes) / 2.0;
  s.set_gbps(committed && round_->seconds > 0 ? moved / round_->seconds / 1e9 : 0);
  history_.push_back(s);
  while (static_cast<int>(history_.size()) > options_.rounds_kept) history_.pop_front();
  outcomes_[round_->version] =
      committed ? absl::OkStatus() : absl::AbortedError(reason);
  while (outcomes_.size() > 1024) outcomes_.erase(outcomes_.begin());
  for (const auto& id : round_->participants) {
    auto it = members_.find(id);
    if (it == members_.end() || it->second.reg.identity().side() != v1::SIDE_ENGINE) {
      continue;
    }
    const std::string& engine = it->second.reg.identity().engine_id();
    if (committed) {
      engine_version_[engine] = round_->version;
      engine_torn_.erase(engine);
    } else {
      engine_torn_[engine] = round_->version;
    }
  }
  v1::RoundEvent e;
  e.set_kind(committed ? v1::RoundEvent::ROUND_COMMITTED
                       : v1::RoundEvent::ROUND_ABORTED);
  e.set_version(round_->version);
  e.set_reason(reason);
  e.set_epoch(plan_epoch_);
  round_.reset();
  Broadcast(e);
}

// --- waits ------------------------------------------------------------------

bool RefitServer::Impl::TrySatisfy(WaitReactor* r, Waiter& w) {
  if (w.kind == Waiter::kKv) {
    auto it = kv_.find(w.key);
    if (it == kv_.end()) return false;
    w.kv_resp->set_value(it->second);
    r->Finish(grpc::Status::OK);
    return true;
  }
  if (members_.count(w.member_id) == 0) {
    r->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                           absl::StrCat("member ", w.member_id,
                                        " is not registered (left or expired)")));
    return true;
  }
  if (plan_dirty_ || plan_epoch_ < w.min_epoch || plan_epoch_ != epoch_) return false;
  if (plan_incomplete_) return false;
  if (!plan_status_.ok()) {
    r->Finish(ToGrpcStatus(plan_status_));
    return true;
  }
  auto it = plan_slices_.find(w.member_id);
  if (it == plan_slices_.end()) return false;  // e.g. its engine is incomplete
  const MemberPlan& mp = it->second;
  const BuiltPlan& built = **current_plan_;
  *w.plan_resp = mp.head;
  w.plan_resp->set_slice(mp.trainer ? built.trainer_slices[mp.index]
                                     : built.engine_slices[mp.index]);
  r->Finish(grpc::Status::OK);
  return true;
}

void RefitServer::Impl::CachePlan(const std::string& fp, PlanEntry plan) {
  int64_t bytes = 0;
  if (plan->ok()) {
    for (const auto* v : {&(*plan)->trainer_slices, &(*plan)->engine_slices}) {
      for (const std::string& p : *v) bytes += static_cast<int64_t>(p.size());
    }
  }
  // Oldest out first, until the new one fits (it is kept even alone over
  // the budget: it is the current plan).
  while (!plan_cache_order_.empty() &&
         (plan_cache_order_.size() >= 16 ||
          plan_cache_bytes_ + bytes > options_.max_plan_cache_bytes)) {
    auto it = plan_cache_.find(plan_cache_order_.front());
    plan_cache_bytes_ -= it->second.bytes;
    plan_cache_.erase(it);
    plan_cache_order_.pop_front();
  }
  plan_cache_[fp] = CachedPlan{std::move(plan), bytes};
  plan_cache_order_.push_back(fp);
  plan_cache_bytes_ += bytes;
}

void RefitServer::Impl::WakeWaiters() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (TrySatisfy(it->first, it->second)) {
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void RefitServer::Impl::CancelWaiter(WaitReactor* r) {
  absl::MutexLock l(&mu_);
  auto it = waiters_.find(r);
  if (it == waiters_.end()) return;
  waiters_.erase(it);
  r->Finish(grpc::Status::CANCELLED);
}

void RefitServer::Impl::WatcherGone(Watcher* w, const std::string& why) {
  absl::MutexLock l(&mu_);
  auto it = watchers_.find(w->member_id());
  if (it == watchers_.end() || it->second != w) return;
  watchers_.erase(it);
  if (!why.empty() && round_ != nullptr &&
      round_->participants.count(w->member_id())) {
    auto m = members_.find(w->member_id());
    EndRound(false, absl::StrCat(
                        "member ",
                        m == members_.end() ? w->member_id()
                                            : Describe(m->second.reg.identity()),
                        ": ", why));
  }
}

// --- housekeeping -----------------------------------------------------------

void RefitServer::Impl::Housekeeping() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](bool* b) { return *b; }, &stopping_),
                         absl::Milliseconds(10));
    if (stopping_) break;
    AnnounceEpoch();
    const absl::Time now = absl::Now();
    // Heartbeats.
    std::vector<std::string> expired;
    for (const auto& [id, m] : members_) {
      if (now - m.last_heartbeat > options_.heartbeat_timeout) expired.push_back(id);
    }
    for (const auto& id : expired) {
      RemoveMember(id, absl::StrCat("stopped heart-beating for more than ",
                                    absl::FormatDuration(options_.heartbeat_timeout)));
    }
    // Round timeout.
    if (round_ != nullptr && now - round_->started > options_.round_timeout) {
      EndRound(false, absl::StrCat("round timed out after ",
                                   absl::FormatDuration(options_.round_timeout)));
    }
    // Expired waits.
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (now >= it->second.deadline) {
        it->first->Finish(grpc::Status(
            grpc::StatusCode::DEADLINE_EXCEEDED,
            it->second.kind == Waiter::kKv
                ? absl::StrCat("key ", it->second.key, " not set before the deadline")
                : "no plan before the deadline"));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    // Plan (between rounds only), once the membership has settled: a burst
    // of joins is planned once, not once per join (but never later than
    // plan_settle_max after the first unplanned change).
    if (plan_dirty_ && round_ == nullptr &&
        (now - last_change_ >= options_.plan_settle ||
         now - dirty_since_ >= options_.plan_settle_max)) {
      std::vector<const Member*> tm, em;
      if (!CompleteMembership(&tm, &em)) {
        plan_dirty_ = false;
        plan_epoch_ = epoch_;
        plan_status_ = absl::UnavailableError("membership incomplete");
        plan_incomplete_ = true;
        plan_slices_.clear();
        plan_fingerprint_.clear();
        continue;  // waiters keep waiting (UNAVAILABLE is not final)
      }
      std::vector<const Registration*> all;
      std::vector<Registration> treg, ereg;
      std::vector<std::string> ids;
      for (auto* m : tm) {
        all.push_back(&m->reg);
        treg.push_back(m->reg);
        ids.push_back(m->id);
      }
      for (auto* m : em) {
        all.push_back(&m->reg);
        ereg.push_back(m->reg);
        ids.push_back(m->id);
      }
      const std::string fp = FingerprintRegistrations(all);
      const int64_t epoch = epoch_;
      auto cached = plan_cache_.find(fp);
      PlanEntry entry;
      if (cached != plan_cache_.end()) {
        entry = cached->second.plan;
      } else {
        mu_.Unlock();  // the planner may take a while
        absl::Status gpus = CheckDataPlane(treg, ereg);
        absl::StatusOr<BuiltPlan> b =
            gpus.ok() ? options_.plan_function(treg, ereg) : absl::StatusOr<BuiltPlan>(gpus);
        if (b.ok() && (b->trainer_slices.size() != treg.size() ||
                       b->engine_slices.size() != ereg.size())) {
          b = absl::InternalError("plan function returned the wrong number of slices");
        }
        entry = std::make_shared<const absl::StatusOr<BuiltPlan>>(std::move(b));
        mu_.Lock();
        if (stopping_) break;
        if (epoch != epoch_) continue;  // membership moved on; rebuild
        CachePlan(fp, entry);
      }
      const absl::StatusOr<BuiltPlan>& built = *entry;
      current_plan_ = entry;
      plan_dirty_ = false;
      plan_incomplete_ = false;
      plan_epoch_ = epoch;
      // What members and status see: the plan's own fingerprint (the
      // registrations' one is the same for plans built with other planner
      // options, e.g. another staging budget).
      const std::string plan_fp =
          built.ok() && !built->fingerprint.empty() ? built->fingerprint : fp;
      plan_fingerprint_ = plan_fp;
      plan_slices_.clear();
      if (!built.ok()) {
        plan_status_ = AnnotateStatus(built.status(), "building the plan");
      } else {
        plan_status_ = absl::OkStatus();
        std::map<std::string, int> engine_index;
        for (auto* m : em) engine_index.emplace(m->reg.identity().engine_id(), 0);
        int k = 0;
        for (auto& [e, i] : engine_index) i = k++;
        for (size_t i = 0; i < ids.size(); ++i) {
          v1::AwaitPlanResponse r;
          r.set_epoch(epoch);
          r.set_fingerprint(plan_fp);
          const bool is_trainer = i < treg.size();
          auto* b = r.mutable_bootstrap();
          b->set_global_rank(static_cast<int>(i));
          b->set_global_world(static_cast<int>(ids.size()));
          b->set_num_lanes(built->num_lanes);
          b->set_kv_prefix(absl::StrCat(options_.kv_prefix, "/", plan_fp, "/"));
          b->set_engine_index(
              is_trainer ? -1
                         : engine_index[ereg[i - treg.size()].identity().engine_id()]);
          MemberPlan mp;
          mp.head = std::move(r);
          mp.trainer = is_trainer;
          mp.index = is_trainer ? i : i - treg.size();
          plan_slices_[ids[i]] = std::move(mp);
        }
      }
      WakeWaiters();
    }
  }
}

// --- RPC handlers -----------------------------------------------------------

grpc::ServerUnaryReactor* RefitServer::Impl::Register(
    grpc::CallbackServerContext* ctx, const v1::RegisterRequest* req,
    v1::RegisterResponse* resp) {
  const Registration& reg = req->registration();
  if (auto s = CheckProtocolVersion(reg); !s.ok()) return Done(ctx, s);
  if (auto s = ValidateRegistration(reg, options_.max_buffers_per_member,
                                    options_.max_metadata_bytes);
      !s.ok()) {
    return Done(ctx, s);
  }
  const auto& ident = reg.identity();
  const std::string id = MemberKey(ident);
  std::string serialized = Serialize(reg);
  absl::MutexLock l(&mu_);
  // Consistency with the members already there.
  for (const auto& [oid, m] : members_) {
    const auto& o = m.reg.identity();
    if (oid == id) continue;
    if (o.side() == ident.side() && o.job() == ident.job() &&
        o.engine_id() == ident.engine_id() && o.world_size() != ident.world_size()) {
      return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "identity.world_size: ", ident.world_size(),
                           " disagrees with ", o.world_size(), " of ",
                           Describe(o))));
    }
    if (o.job() != ident.job()) {
      return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "identity.job: ", ident.job(), " differs from job ",
                           o.job(), " already registered")));
    }
  }
  auto it = members_.find(id);
  if (it != members_.end() && it->second.serialized == serialized) {
    it->second.last_heartbeat = absl::Now();
    resp->set_member_id(id);
    resp->set_already_registered(true);
    return Done(ctx, absl::OkStatus());
  }
  if (it != members_.end() && round_ != nullptr && round_->participants.count(id)) {
    EndRound(false, absl::StrCat("member ", Describe(ident),
                                 " re-registered with different metadata"));
  }
  Member& m = members_[id];
  m.id = id;
  m.reg = reg;
  m.serialized = std::move(serialized);
  m.last_heartbeat = absl::Now();
  MembershipChanged();
  resp->set_member_id(id);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::AwaitPlan(
    grpc::CallbackServerContext* ctx, const v1::AwaitPlanRequest* req,
    v1::AwaitPlanResponse* resp) {
  auto* r = new WaitReactor(this);
  absl::MutexLock l(&mu_);
  if (stopping_) {
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "refitd shutting down"));
    return r;
  }
  Waiter w;
  w.kind = Waiter::kPlan;
  w.member_id = req->member_id();
  w.min_epoch = req->min_epoch();
  w.plan_resp = resp;
  w.deadline = WaitDeadline(ctx);
  if (!TrySatisfy(r, w)) waiters_.emplace(r, std::move(w));
  return r;
}

grpc::ServerUnaryReactor* RefitServer::Impl::StartRound(
    grpc::CallbackServerContext* ctx, const v1::StartRoundRequest* req,
    v1::StartRoundResponse* resp) {
  absl::MutexLock l(&mu_);
  auto it = members_.find(req->member_id());
  if (it == members_.end()) {
    return Done(ctx, absl::NotFoundError(absl::StrCat(
                         "member_id: ", req->member_id(), " is not registered")));
  }
  if (it->second.reg.identity().side() != v1::SIDE_TRAINER) {
    return Done(ctx, absl::PermissionDeniedError(
                         "member_id: only trainer members start rounds"));
  }
  const int64_t v = req->version();
  if (round_ != nullptr) {
    if (round_->version == v) {
      resp->set_already_started(true);
      return Done(ctx, absl::OkStatus());
    }
    return Done(ctx, absl::FailedPreconditionError(absl::StrCat(
                         "version: round ", round_->version,
                         " is still running; cannot start ", v)));
  }
  if (v == last_version_ && v > 0) {
    resp->set_already_started(true);
    return Done(ctx, absl::OkStatus());
  }
  if (v <= last_version_) {
    return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                         "version: ", v, " is not above the last version ",
                         last_version_)));
  }
  if (plan_dirty_ || plan_epoch_ != epoch_) {
    return Done(ctx, absl::UnavailableError(
                         "membership changed; the new plan is being built, retry"));
  }
  if (plan_incomplete_ || !plan_status_.ok()) {
    return Done(ctx, absl::FailedPreconditionError(absl::StrCat(
                         "no valid plan: ", plan_status_.message())));
  }
  // A participant without a stream (it registered a moment ago, or its
  // process died and has not expired yet) could not learn of the round.
  for (const auto& [id, slice] : plan_slices_) {
    if (watchers_.count(id) == 0) {
      auto m = members_.find(id);
      return Done(ctx, absl::UnavailableError(absl::StrCat(
                           "member ",
                           m == members_.end() ? id : Describe(m->second.reg.identity()),
                           " has no round stream yet; retry")));
    }
  }
  round_ = std::make_unique<ActiveRound>();
  round_->version = v;
  round_->started = absl::Now();
  for (const auto& [id, slice] : plan_slices_) round_->participants.insert(id);
  last_version_ = v;
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::ROUND_STARTED);
  e.set_version(v);
  e.set_epoch(plan_epoch_);
  Broadcast(e);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::RoundEvent>* RefitServer::Impl::WatchRounds(
    grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) {
  auto* w = new Watcher(this, req->member_id());
  absl::MutexLock l(&mu_);
  if (stopping_ || members_.count(req->member_id()) == 0) {
    w->End(grpc::Status(grpc::StatusCode::NOT_FOUND, "member_id: not registered"));
    return w;
  }
  auto old = watchers_.find(req->member_id());
  if (old != watchers_.end()) {
    Watcher* prev = old->second;
    watchers_.erase(old);
    prev->End(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream"));
  }
  watchers_[req->member_id()] = w;
  // Tell a late watcher where things stand.
  v1::RoundEvent e;
  e.set_kind(v1::RoundEvent::PLAN_CHANGED);
  e.set_epoch(epoch_);
  w->Push(e);
  if (round_ != nullptr) {
    e.set_kind(v1::RoundEvent::ROUND_STARTED);
    e.set_version(round_->version);
    e.set_epoch(plan_epoch_);
    w->Push(e);
  }
  return w;
}

grpc::ServerUnaryReactor* RefitServer::Impl::Report(
    grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
    v1::ReportResponse* resp) {
  absl::MutexLock l(&mu_);
  const int64_t v = req->version();
  if (round_ == nullptr || round_->version != v) {
    auto o = outcomes_.find(v);
    if (o != outcomes_.end()) {
      // Late report of a finished round: tell the caller how it ended.
      return Done(ctx, o->second.ok()
                           ? absl::OkStatus()
                           : absl::AbortedError(absl::StrCat(
                                 "round ", v, " already aborted: ",
                                 o->second.message())));
    }
    return Done(ctx, absl::FailedPreconditionError(
                         absl::StrCat("version: round ", v, " is not running")));
  }
  if (round_->participants.count(req->member_id()) == 0) {
    return Done(ctx, absl::FailedPreconditionError(absl::StrCat(
                         "member_id: ", req->member_id(),
                         " is not a participant of round ", v)));
  }
  members_[req->member_id()].last_heartbeat = absl::Now();
  if (!req->ok()) {
    EndRound(false, absl::StrCat(
                        "member ", Describe(members_[req->member_id()].reg.identity()),
                        " failed: ", req->reason()));
    return Done(ctx, absl::OkStatus());
  }
  if (round_->done.insert(req->member_id()).second) {
    round_->bytes += req->bytes();
    round_->seconds = std::max(round_->seconds, req->seconds());
  }
  if (round_->done.size() == round_->participants.size()) EndRound(true, "");
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
    v1::HeartbeatResponse* resp) {
  absl::MutexLock l(&mu_);
  auto it = members_.find(req->member_id());
  if (it == members_.end()) {
    return Done(ctx, absl::NotFoundError(absl::StrCat(
                         "member_id: ", req->member_id(), " is not registered")));
  }
  it->second.last_heartbeat = absl::Now();
  resp->set_active_version(round_ != nullptr ? round_->version : 0);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::Leave(grpc::CallbackServerContext* ctx,
                                                   const v1::LeaveRequest* req,
                                                   v1::LeaveResponse* resp) {
  absl::MutexLock l(&mu_);
  RemoveMember(req->member_id(), "left");
  WakeWaiters();
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::CurrentVersion(
    grpc::CallbackServerContext* ctx, const v1::CurrentVersionRequest* req,
    v1::CurrentVersionResponse* resp) {
  absl::MutexLock l(&mu_);
  auto it = engine_version_.find(req->engine_id());
  resp->set_version(it == engine_version_.end() ? 0 : it->second);
  auto torn = engine_torn_.find(req->engine_id());
  resp->set_torn_version(torn == engine_torn_.end() ? 0 : torn->second);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::KvSet(grpc::CallbackServerContext* ctx,
                                                   const v1::KvSetRequest* req,
                                                   v1::KvSetResponse* resp) {
  if (req->key().empty()) return Done(ctx, absl::InvalidArgumentError("key: empty"));
  absl::MutexLock l(&mu_);
  kv_[req->key()] = req->value();
  WakeWaiters();
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RefitServer::Impl::KvGet(grpc::CallbackServerContext* ctx,
                                                   const v1::KvGetRequest* req,
                                                   v1::KvGetResponse* resp) {
  auto* r = new WaitReactor(this);
  absl::MutexLock l(&mu_);
  Waiter w;
  w.kind = Waiter::kKv;
  w.key = req->key();
  w.kv_resp = resp;
  w.deadline = WaitDeadline(ctx);
  if (TrySatisfy(r, w)) return r;
  if (!req->wait() || stopping_) {
    r->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                           absl::StrCat("key ", req->key(), " is not set")));
    return r;
  }
  waiters_.emplace(r, std::move(w));
  return r;
}

grpc::ServerUnaryReactor* RefitServer::Impl::GetStatus(
    grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
    v1::StatusResponse* resp) {
  resp->set_protocol_version(kProtocolVersion);
  absl::MutexLock l(&mu_);
  const absl::Time now = absl::Now();
  for (const auto& [id, m] : members_) {
    auto* ms = resp->add_members();
    ms->set_member_id(id);
    *ms->mutable_identity() = m.reg.identity();
    ms->set_num_buffers(m.reg.buffers_size());
    ms->set_seconds_since_heartbeat(absl::ToDoubleSeconds(now - m.last_heartbeat));
  }
  resp->set_plan_fingerprint(plan_fingerprint_);
  resp->set_epoch(plan_epoch_);
  if (!plan_status_.ok()) resp->set_plan_error(std::string(plan_status_.message()));
  for (const auto& s : history_) *resp->add_rounds() = s;
  std::set<std::string> engines;
  for (const auto& [id, m] : members_) {
    if (m.reg.identity().side() == v1::SIDE_ENGINE) engines.insert(m.reg.identity().engine_id());
  }
  for (const std::string& e : engines) {
    auto* es = resp->add_engines();
    es->set_engine_id(e);
    auto c = engine_version_.find(e);
    es->set_committed_version(c == engine_version_.end() ? 0 : c->second);
    auto t = engine_torn_.find(e);
    es->set_torn_version(t == engine_torn_.end() ? 0 : t->second);
  }
  if (round_ != nullptr) {
    auto* s = resp->add_rounds();
    s->set_version(round_->version);
    s->set_outcome("running");
    s->set_bytes(round_->bytes);
  }
  return Done(ctx, absl::OkStatus());
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RefitServer>> RefitServer::Start(Options options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  REFIT_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<RefitServer>(new RefitServer(std::move(impl)));
}

RefitServer::RefitServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RefitServer::~RefitServer() { Shutdown(); }
int RefitServer::port() const { return impl_->port(); }
void RefitServer::Shutdown() { impl_->Shutdown(); }

}  // namespace refit
