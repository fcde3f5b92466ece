// GlooTransport: Gloo unbound buffers over TCP, one context per lane.
#include "exec/transport/gloo_transport.h"

#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace refit {
namespace {

// gloo::rendezvous::Store over a refit::KvStore (keys prefixed). Gloo
// expects exceptions on failure.
class KvStoreAdapter : public gloo::rendezvous::Store {
 public:
  KvStoreAdapter(KvStore* kv, std::string prefix, absl::Duration timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = kv_->Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(std::string(s.message()));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = kv_->Get(prefix_ + key, timeout_);
    if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline =
        absl::Now() + absl::Milliseconds(timeout.count());
    for (const std::string& k : keys) {
      absl::StatusOr<std::string> v =
          kv_->Get(prefix_ + k, std::max(deadline - absl::Now(),
                                         absl::ZeroDuration()));
      if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    }
  }

 private:
  KvStore* kv_;
  std::string prefix_;
  absl::Duration timeout_;
};

}  // namespace

struct GlooTransport::Lane {
  std::shared_ptr<gloo::rendezvous::Context> context;
  // Per peer: next sequence numbers of sends to / receives from it.
  std::vector<uint64_t> send_seq, recv_seq;
  struct Op {
    bool send;
    int32_t peer;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  };
  std::vector<Op> in_flight;
  absl::Status error;
};

namespace {
uint64_t Slot(int32_t from, int32_t to, uint64_t seq) {
  return (seq << 1) | (from < to ? 0 : 1);
}
}  // namespace

absl::StatusOr<std::unique_ptr<GlooTransport>> GlooTransport::Create(
    KvStore* store, int32_t rank, int32_t world_size,
    GlooTransportOptions options) {
  if (store == nullptr || world_size < 1 || rank < 0 || rank >= world_size ||
      options.num_lanes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo transport: bad rank ", rank, " of ", world_size, " or ",
        options.num_lanes, " lanes"));
  }
  std::unique_ptr<GlooTransport> t(new GlooTransport());
  t->rank_ = rank;
  t->world_size_ = world_size;
  gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  for (int32_t l = 0; l < options.num_lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->send_seq.assign(world_size, 0);
    lane->recv_seq.assign(world_size, 0);
    try {
      auto dev = gloo::transport::tcp::CreateDevice(attr);
      lane->context =
          std::make_shared<gloo::rendezvous::Context>(rank, world_size);
      lane->context->setTimeout(std::chrono::milliseconds(
          absl::ToInt64Milliseconds(options.connect_timeout)));
      KvStoreAdapter adapter(store,
                             absl::StrCat(options.key_prefix, "/lane", l, "/"),
                             options.connect_timeout);
      lane->context->connectFullMesh(adapter, dev);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "gloo transport: rank ", rank, " could not connect lane ", l,
          " with its ", world_size - 1, " peers: ", e.what()));
    }
    t->lanes_.push_back(std::move(lane));
  }
  return t;
}

GlooTransport::~GlooTransport() {
  // Before the posted buffers go: nothing arrives into them meanwhile.
  CloseConnections();
}

void GlooTransport::CloseConnections() {
  for (auto& lane : lanes_) {
    try {
      lane->context->closeConnections();
    } catch (const std::exception&) {
      // A pair that fails to close is closed as far as gloo goes.
    }
  }
}

int32_t GlooTransport::num_lanes() const {
  return static_cast<int32_t>(lanes_.size());
}

absl::Status GlooTransport::StartWave(int32_t lane,
                                       absl::Span<const SendOp> sends,
                                       absl::Span<const RecvOp> recvs,
                                       absl::Time /*deadline: posting never blocks*/) {
  REFIT_RETURN_IF_ERROR(CheckWaveArguments(rank_, world_size_, num_lanes(), lane, sends, recvs));
  Lane& L = *lanes_[lane];
  if (!L.error.ok()) return L.error;
  if (cancel_.cancelled()) return L.error = cancel_.status();
  if (!L.in_flight.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": a wave is still in flight on lane ", lane));
  }
  try {
    // Receives first, so that peers' sends find them posted.
    for (const RecvOp& r : recvs) {
      if (r.bytes == 0) continue;
      auto buf = L.context->createUnboundBuffer(r.ptr, r.bytes);
      buf->recv(r.peer, Slot(r.peer, rank_, L.recv_seq[r.peer]++));
      absl::MutexLock l(&cancel_mu_);
      if (cancel_.cancelled()) buf->abortWaitRecv();
      L.in_flight.push_back(Lane::Op{false, r.peer, std::move(buf)});
    }
    for (const SendOp& s : sends) {
      if (s.bytes == 0) continue;
      auto buf =
          L.context->createUnboundBuffer(const_cast<void*>(s.ptr), s.bytes);
      buf->send(s.peer, Slot(rank_, s.peer, L.send_seq[s.peer]++));
      absl::MutexLock l(&cancel_mu_);
      if (cancel_.cancelled()) buf->abortWaitSend();
      L.in_flight.push_back(Lane::Op{true, s.peer, std::move(buf)});
    }
  } catch (const std::exception& e) {
    L.error = absl::UnavailableError(absl::StrCat(
        "rank ", rank_, " lane ", lane, ": posting a wave failed: ", e.what()));
    CloseConnections();  // what was posted before stays out of the caller's memory
    return L.error;
  }
  return absl::OkStatus();
}

absl::Status GlooTransport::WaitWave(int32_t lane, absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(CheckLane(rank_, lane, num_lanes()));
  Lane& L = *lanes_[lane];
  if (!L.error.ok()) return L.error;
  for (Lane::Op& op : L.in_flight) {
    const int64_t ms = std::max<int64_t>(
        1, absl::ToInt64Milliseconds(deadline - absl::Now()));
    bool ok = false;
    std::string what;
    try {
      ok = op.send ? op.buf->waitSend(std::chrono::milliseconds(ms))
                   : op.buf->waitRecv(std::chrono::milliseconds(ms));
    } catch (const std::exception& e) {
      what = e.what();
    }
    if (ok) continue;
    if (cancel_.cancelled()) {
      L.error = cancel_.status();
    } else {
      const bool timed_out = what.empty() || absl::Now() >= deadline ||
                             what.find("imed out") != std::string::npos;
      const std::string msg = absl::StrCat(
          "rank ", rank_, " lane ", lane, ": ", op.send ? "send to" : "receive from",
          " peer rank ", op.peer, timed_out ? " did not complete by the deadline"
                                            : " failed (peer gone?)",
          what.empty() ? "" : absl::StrCat(": ", what));
      L.error = timed_out ? absl::DeadlineExceededError(msg) : absl::UnavailableError(msg);
    }
    // Buffers still posted point at caller memory, which the caller may
    // free now: nothing may arrive into them any more (Cancel closes the
    // connections too; this wait may return before it does).
    CloseConnections();
    return L.error;
  }
  absl::MutexLock l(&cancel_mu_);
  L.in_flight.clear();
  return absl::OkStatus();
}

void GlooTransport::Cancel(const absl::Status& reason) {
  absl::MutexLock l(&cancel_mu_);
  if (!cancel_.Cancel(reason)) return;
  for (auto& lane : lanes_) {
    for (Lane::Op& op : lane->in_flight) {
      if (op.send) {
        op.buf->abortWaitSend();
      } else {
        op.buf->abortWaitRecv();
      }
    }
  }
  CloseConnections();
}

}  // namespace refit
