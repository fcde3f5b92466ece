// RefitClient over the synchronous gRPC stub: unary calls with deadlines, a
// reader thread for the round stream, a heartbeat thread.
#include "client/refit_client.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/log.h"
#include "client/server_target.h"
#include "common/grpc_status.h"
#include "common/member_secret.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/protocol_version.h"

namespace refit {
absl::Status RefitClient::CheckOptions(const Options& options, std::string* token) {
  *token = std::string(absl::StripAsciiWhitespace(options.bearer_token));
  // gRPC aborts the process on a header value outside printable ASCII; the
  // byte is named by position only, so the secret never reaches a log.
  for (size_t i = 0; i < token->size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>((*token)[i]);
    if (ch < 0x20 || ch > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", ch);
      token->clear();
      return absl::InvalidArgumentError(absl::StrCat(
          "token: byte ", i + 1, " (", hex, ") is not printable ASCII, which a gRPC "
          "header cannot carry (the token is not shown); check the token file"));
    }
  }
  return CheckServerTarget(options.target);
}

std::shared_ptr<grpc::Channel> RefitClient::NewChannel(const Options& o) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT32_MAX);
  args.SetMaxSendMessageSize(INT32_MAX);
  // After refitd restarts, reconnect within ~2 s of it being back (gRPC's
  // default backoff grows to 2 minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Pings, with or without calls and without limit: a refitd that stops
  // answering them fails every wait within keepalive_interval +
  // keepalive_timeout (refitd permits them: refit_server.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(o.keepalive_interval)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(o.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (o.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.root_ca_pem;
    ssl.pem_cert_chain = o.client_cert_pem;
    ssl.pem_private_key = o.client_key_pem;
    creds = grpc::SslCredentials(ssl);
    if (!o.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(o.tls_server_name);
    }
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(o.target, creds, args);
}

absl::StatusOr<std::unique_ptr<RefitClient>> RefitClient::Connect(Options options) {
  std::string token;
  REFIT_RETURN_IF_ERROR(CheckOptions(options, &token));
  options.bearer_token = std::move(token);
  std::unique_ptr<RefitClient> c(new RefitClient(std::move(options)));
  const Options& o = c->options_;
  c->channel_ = NewChannel(o);
  c->stub_ = v1::RefitService::NewStub(c->channel_);
  if (!c->channel_->WaitForConnected(
          absl::ToChronoTime(absl::Now() + o.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "refitd at ", o.target, " not reachable within ",
        absl::FormatDuration(o.connect_timeout), c->WhyNotConnected()));
  }
  return c;
}

absl::Status RefitClient::CheckReachable(absl::Time deadline) {
  const absl::Time until = std::min(deadline, absl::Now() + options_.connect_timeout);
  if (channel_->WaitForConnected(absl::ToChronoTime(until))) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "refitd at ", options_.target, " not reachable within ",
      absl::FormatDuration(options_.connect_timeout), WhyNotConnected(),
      " (rejoin once it is back)"));
}

std::string RefitClient::WhyNotConnected() {
  // A call that does not wait for the channel fails at once with the
  // transport's last error.
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
  v1::StatusRequest req;
  v1::StatusResponse resp;
  const grpc::Status st = stub_->GetStatus(&ctx, req, &resp);
  const std::string& m = st.error_message();
  if (absl::StrContains(m, "Connection refused")) {
    return ": connection refused (is refitd running, and listening on this address?)";
  }
  if (absl::StrContains(m, "DNS resolution failed") ||
      absl::StrContains(m, "not known")) {
    return ": the host name does not resolve";
  }
  if (st.ok() || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || m.empty()) {
    return "";
  }
  return absl::StrCat(": ", m);
}

absl::Status RefitClient::FromRpc(const grpc::Status& status) const {
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    // This client never cancels a call it waits on: refitd ended it.
    return absl::UnavailableError(absl::StrCat(
        "refitd at ", options_.target, " closed the connection (shutting down?)",
        status.error_message().empty() ? "" : ": ", status.error_message()));
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      absl::StrContains(status.error_message(), "Connection refused")) {
    return absl::UnavailableError(absl::StrCat(
        "refitd at ", options_.target, ": connection refused (refitd is not running "
        "there, or restarting: rejoin once it is back)"));
  }
  return FromGrpcStatus(status);
}

RefitClient::~RefitClient() { StopThreads(); }

void RefitClient::StopThreads() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (reader_.joinable()) reader_.join();
  if (heartbeater_.joinable()) heartbeater_.join();
}

std::unique_ptr<grpc::ClientContext> RefitClient::MakeContext(absl::Time deadline) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(deadline));
  if (!options_.bearer_token.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
  return ctx;
}

absl::StatusOr<std::string> RefitClient::Register(const v1::Registration& registration) {
  v1::Registration sent = registration;
  if (sent.protocol_version() == 0) sent.set_protocol_version(kProtocolVersion);
  // refitd answers UNAVAILABLE while this member's identity is still held
  // by its previous process (one that died, until refitd expires it):
  // retry for up to the longer of rpc_timeout and connect_timeout.
  const absl::Time until =
      absl::Now() + std::max(options_.rpc_timeout, options_.connect_timeout);
  for (;;) {
    absl::StatusOr<std::string> id =
        RegisterOnce(sent, std::min(until, absl::Now() + options_.rpc_timeout));
    if (id.ok() || !absl::IsUnavailable(id.status()) || !member_id_.empty() ||
        absl::Now() + absl::Milliseconds(200) >= until) {
      return id;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status RefitClient::Refuse(const v1::Registration& registration,
                                 const std::string& reason, absl::Time deadline) {
  v1::RegisterRequest req;
  *req.mutable_registration() = registration;
  if (registration.protocol_version() == 0) {
    req.mutable_registration()->set_protocol_version(kProtocolVersion);
  }
  req.set_job_key(options_.job_key);
  req.set_refusal(reason.empty() ? "no reason given" : reason);
  v1::RegisterResponse resp;
  auto ctx = MakeContext(std::min(deadline, absl::Now() + options_.rpc_timeout));
  return FromRpc(stub_->Register(ctx.get(), req, &resp));
}

void RefitClient::ResetSession() {
  StopThreads();
  absl::MutexLock l(&mu_);
  member_id_.clear();
  stopping_ = false;
  leaving_ = false;
  left_ = false;
  stream_broken_ = false;
  stream_ready_ = false;
  stream_error_.clear();
  latest_epoch_ = 0;
  plan_epoch_ = -1;
  latest_started_ = 0;
  latest_attempt_ = 0;
  last_returned_ = 0;
  last_returned_attempt_ = 0;
  outcomes_.clear();
  round_epochs_.clear();
  round_attempts_.clear();
}

absl::Status RefitClient::Rejoin(absl::Time deadline) {
  if (registration_.identity().job().empty()) {
    return absl::FailedPreconditionError(
        "Rejoin: this client never registered successfully");
  }
  absl::Status last;
  for (;;) {
    ResetSession();
    const absl::Time attempt = std::min(deadline, absl::Now() + options_.rpc_timeout);
    if (channel_->WaitForConnected(absl::ToChronoTime(attempt))) {
      absl::StatusOr<std::string> id = RegisterOnce(v1::Registration(registration_), attempt);
      if (id.ok()) return absl::OkStatus();
      last = id.status();
      if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
    } else {
      last = absl::UnavailableError(absl::StrCat("not reachable", WhyNotConnected()));
    }
    if (absl::Now() + absl::Milliseconds(200) >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ResetSession();
  return absl::UnavailableError(absl::StrCat("refitd at ", options_.target,
                                             " did not take this member back "
                                             "before the deadline: ",
                                             last.message()));
}

absl::StatusOr<std::string> RefitClient::RegisterOnce(const v1::Registration& reg,
                                                      absl::Time deadline) {
  v1::RegisterRequest req;
  *req.mutable_registration() = reg;
  req.set_member_secret(member_secret_);
  req.set_job_key(options_.job_key);
  v1::RegisterResponse resp;
  auto ctx = MakeContext(deadline);
  REFIT_RETURN_IF_ERROR(FromRpc(stub_->Register(ctx.get(), req, &resp)));
  registration_ = reg;  // refitd holds it now: what Rejoin sends again
  const bool first = member_id_.empty();
  member_id_ = resp.member_id();
  ClientLog().info("registered member={} refitd={}", member_id_, options_.target);
  if (first) {
    auto sctx = MakeContext(absl::InfiniteFuture());
    {
      absl::MutexLock l(&mu_);
      stream_ctx_ = sctx.get();
    }
    reader_ = std::thread([this, c = sctx.release()]() mutable {
      ReadStream(std::unique_ptr<grpc::ClientContext>(c));
    });
    heartbeater_ = std::thread([this] { HeartbeatLoop(); });
    // Return only once the round stream is live, so no round is missed.
    absl::MutexLock l(&mu_);
    auto live = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stream_ready_ || stream_broken_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&live), deadline) || stream_broken_) {
      return absl::UnavailableError(absl::StrCat(
          "round stream not established: ", stream_error_));
    }
  }
  return member_id_;
}

void RefitClient::ReadStream(std::unique_ptr<grpc::ClientContext> ctx) {
  v1::WatchRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  auto reader = stub_->WatchRounds(ctx.get(), req);
  v1::RoundEvent e;
  while (reader->Read(&e)) {
    absl::MutexLock l(&mu_);
    stream_ready_ = true;
    switch (e.kind()) {
      case v1::RoundEvent::ROUND_STARTED: {
        const int32_t attempt = std::max(1, e.attempt());
        if (e.version() > latest_started_ ||
            (e.version() == latest_started_ && attempt > latest_attempt_)) {
          latest_started_ = e.version();
          latest_attempt_ = attempt;
        }
        round_epochs_[e.version()] = e.epoch();
        // A round on a newer plan may be announced before (or instead of)
        // its PLAN_CHANGED: the member's plan is stale either way.
        latest_epoch_ = std::max(latest_epoch_, e.epoch());
        round_modes_[e.version()] =
            RoundMode{{e.delta_base().begin(), e.delta_base().end()}, e.verify(), e.delta_plane()};
        while (round_modes_.size() > 1024) round_modes_.erase(round_modes_.begin());
        round_attempts_[e.version()] = std::max(round_attempts_[e.version()], attempt);
        while (round_epochs_.size() > 1024) round_epochs_.erase(round_epochs_.begin());
        while (round_attempts_.size() > 1024) round_attempts_.erase(round_attempts_.begin());
        break;
      }
      case v1::RoundEvent::ROUND_STAGED:
        staged_.insert({e.version(), std::max(1, e.attempt())});
        while (staged_.size() > 1024) staged_.erase(staged_.begin());
        break;
      case v1::RoundEvent::ROUND_COMMITTED:
        outcomes_[{e.version(), std::max(1, e.attempt())}] = absl::OkStatus();
        break;
      case v1::RoundEvent::ROUND_ABORTED:
        ClientLog().warn("round aborted round={} member={} reason={}", e.version(),
                         member_id_, e.reason());
        outcomes_[{e.version(), std::max(1, e.attempt())}] = absl::AbortedError(
            absl::StrCat("round ", e.version(), " aborted: ", e.reason()));
        break;
      case v1::RoundEvent::PLAN_CHANGED:
        latest_epoch_ = std::max(latest_epoch_, e.epoch());
        break;
      default:
        break;
    }
  }
  grpc::Status st = reader->Finish();
  absl::MutexLock l(&mu_);
  if (!stream_broken_) {  // else the heartbeats already said why
    stream_broken_ = true;
    stream_error_ = absl::StrCat("round stream from refitd ended: ",
                                 FromRpc(st).message(),
                                 " (Rejoin registers again once refitd is back)");
  }
  if (!stopping_ && !leaving_) {
    ClientLog().warn("round stream ended member={} refitd={} reason={}", member_id_,
                     options_.target, st.error_message());
  }
  stream_ctx_ = nullptr;
}

void RefitClient::SetLiveRound(int64_t version, int32_t attempt,
                               std::function<int64_t()> bytes) {
  absl::MutexLock l(&mu_);
  live_version_ = bytes ? version : 0;
  live_attempt_ = attempt;
  live_bytes_ = std::move(bytes);
}

void RefitClient::HeartbeatLoop() {
  absl::MutexLock l(&mu_);
  absl::Time last_answer = absl::Now();
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.heartbeat_interval);
    if (stopping_) break;
    v1::HeartbeatRequest req;
    if (live_version_ != 0 && live_bytes_) {
      req.set_round_version(live_version_);
      req.set_round_attempt(live_attempt_);
      req.set_round_bytes(live_bytes_());
    }
    mu_.Unlock();
    req.set_member_id(member_id_);
    req.set_member_secret(member_secret_);
    v1::HeartbeatResponse resp;
    auto ctx = MakeContext(absl::Now() +
                           std::min(options_.rpc_timeout, options_.refitd_timeout));
    // Failures are the server's to judge (it expires members that stop),
    // except NOT_FOUND: refitd no longer knows this member (it expired it,
    // or restarted), so waiting for rounds is pointless.
    const grpc::Status st = stub_->Heartbeat(ctx.get(), req, &resp);
    mu_.Lock();
    const absl::Time now = absl::Now();
    if (st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
        st.error_code() != grpc::StatusCode::UNAVAILABLE) {
      last_answer = now;
    } else if (now - last_answer > options_.refitd_timeout && !stream_broken_) {
      // A frozen (SIGSTOP), hung or partitioned refitd: waits for rounds
      // fail now with the reason instead of at their own deadlines.
      stream_broken_ = true;
      stream_error_ = absl::StrCat(
          "refitd at ", options_.target, " did not answer heartbeats for ",
          absl::FormatDuration(now - last_answer), " (", st.error_message(), ")");
      if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
    }
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (!stream_broken_) {
        stream_broken_ = true;
        stream_error_ = absl::StrCat("refitd no longer knows this member: ",
                                     st.error_message(),
                                     " (Rejoin registers it again)");
        if (!leaving_) {
          ClientLog().warn("refitd no longer knows this member member={} reason={}",
                           member_id_, st.error_message());
        }
      }
      break;
    }
    if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      // Another process took this member over (with the job key): this
      // one can no longer act for it.
      if (!stream_broken_) {
        stream_broken_ = true;
        stream_error_ = absl::StrCat("refitd refused this member's secret: ",
                                     st.error_message());
      }
      break;
    }
  }
}

absl::StatusOr<v1::AwaitPlanResponse> RefitClient::AwaitPlan(absl::Time deadline) {
  v1::AwaitPlanRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  {
    absl::MutexLock l(&mu_);
    req.set_min_epoch(latest_epoch_);
  }
  v1::AwaitPlanResponse resp;
  auto ctx = MakeContext(deadline);
  REFIT_RETURN_IF_ERROR(FromRpc(stub_->AwaitPlan(ctx.get(), req, &resp)));
  absl::MutexLock l(&mu_);
  plan_epoch_ = resp.epoch();
  latest_epoch_ = std::max(latest_epoch_, resp.epoch());
  return resp;
}

int32_t RefitClient::RoundAttempt(int64_t version) {
  absl::MutexLock l(&mu_);
  auto it = round_attempts_.find(version);
  return it == round_attempts_.end() ? 0 : it->second;
}

int64_t RefitClient::plan_epoch() {
  absl::MutexLock l(&mu_);
  return plan_epoch_;
}

absl::StatusOr<int64_t> RefitClient::RoundEpoch(int64_t version) {
  absl::MutexLock l(&mu_);
  auto it = round_epochs_.find(version);
  if (it == round_epochs_.end()) {
    return absl::NotFoundError(absl::StrCat("round ", version, " was not seen to start"));
  }
  return it->second;
}

RefitClient::RoundMode RefitClient::RoundModeOf(int64_t version) {
  absl::MutexLock l(&mu_);
  auto it = round_modes_.find(version);
  return it == round_modes_.end() ? RoundMode() : it->second;
}

bool RefitClient::PlanChanged() {
  absl::MutexLock l(&mu_);
  return latest_epoch_ > plan_epoch_;
}

absl::Status RefitClient::StartRound(int64_t version, absl::Time deadline) {
  return StartRoundRpc(version, /*next=*/false, deadline).status();
}

absl::StatusOr<int64_t> RefitClient::StartNextRound(absl::Time deadline) {
  return StartRoundRpc(0, /*next=*/true, deadline);
}

absl::StatusOr<int64_t> RefitClient::StartRoundRpc(int64_t version, bool next,
                                                   absl::Time deadline) {
  v1::StartRoundRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  req.set_version(version);
  req.set_next_version(next);
  {
    absl::MutexLock l(&mu_);
    if (plan_epoch_ >= 0) req.set_plan_epoch(plan_epoch_);
  }
  v1::StartRoundResponse resp;
  auto ctx = MakeContext(deadline);
  REFIT_RETURN_IF_ERROR(FromRpc(stub_->StartRound(ctx.get(), req, &resp)));
  // A refitd older than next_version answers no version: the one asked for.
  return resp.version() > 0 ? resp.version() : version;
}

absl::StatusOr<int64_t> RefitClient::WaitForRound(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  // A round not returned yet: a higher version, or the same version run
  // again (a higher attempt) after its abort.
  auto unseen = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return latest_started_ > last_returned_ ||
           (latest_started_ == last_returned_ && latest_attempt_ > last_returned_attempt_);
  };
  auto ready = [this, &unseen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unseen() || stream_broken_ || stopping_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (unseen()) {
    last_returned_ = latest_started_;
    last_returned_attempt_ = latest_attempt_;
    return latest_started_;
  }
  if (stream_broken_ || stopping_) return absl::UnavailableError(stream_error_);
  return absl::DeadlineExceededError("no round started before the deadline");
}

absl::Status RefitClient::ReportDone(int64_t version, const RoundFigures& figures,
                                     absl::Time deadline, int32_t attempt) {
  v1::ReportRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  req.set_version(version);
  req.set_attempt(attempt > 0 ? attempt : RoundAttempt(version));
  req.set_ok(true);
  req.set_bytes(figures.bytes);
  req.set_seconds(figures.seconds);
  req.set_peak_staging_bytes(figures.peak_staging_bytes);
  for (const v1::DigestPart& p : figures.digests) *req.add_digests() = p;
  req.set_digest_scheme(figures.digest_scheme);
  req.set_digest_seconds(figures.digest_seconds);
  req.set_staged(figures.staged);
  v1::ReportResponse resp;
  auto ctx = MakeContext(deadline);
  return FromRpc(stub_->Report(ctx.get(), req, &resp));
}

absl::Status RefitClient::ReportApplied(int64_t version, double pause_seconds,
                                        absl::Time deadline, int32_t attempt) {
  v1::ReportRequest req;
  req.set_applied(true);
  req.set_pause_seconds(pause_seconds);
  return ReportApply(version, std::move(req), deadline, attempt);
}

absl::Status RefitClient::ReportApplying(int64_t version, absl::Time deadline,
                                         int32_t attempt) {
  v1::ReportRequest req;
  req.set_applying(true);
  return ReportApply(version, std::move(req), deadline, attempt);
}

absl::Status RefitClient::ReportApply(int64_t version, v1::ReportRequest req,
                                      absl::Time deadline, int32_t attempt) {
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  req.set_version(version);
  req.set_attempt(attempt > 0 ? attempt : RoundAttempt(version));
  req.set_ok(true);
  v1::ReportResponse resp;
  auto ctx = MakeContext(deadline);
  return FromRpc(stub_->Report(ctx.get(), req, &resp));
}

absl::Status RefitClient::ReportFailed(int64_t version, const std::string& reason,
                                       absl::Time deadline, int32_t attempt) {
  v1::ReportRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  req.set_version(version);
  req.set_attempt(attempt > 0 ? attempt : RoundAttempt(version));
  req.set_ok(false);
  // refitd keeps 4 KiB of a reason and refuses one over 64 KiB: send the
  // first 4 KiB (cut at a UTF-8 character boundary).
  constexpr size_t kMaxReasonBytes = 4096;
  size_t keep = std::min(reason.size(), kMaxReasonBytes);
  while (keep < reason.size() && keep > 0 &&
         (static_cast<unsigned char>(reason[keep]) & 0xC0) == 0x80) {
    --keep;
  }
  req.set_reason(reason.substr(0, keep));
  v1::ReportResponse resp;
  auto ctx = MakeContext(deadline);
  return FromRpc(stub_->Report(ctx.get(), req, &resp));
}

absl::StatusOr<v1::PlanProto> RefitClient::Slice(const v1::AwaitPlanResponse& r) {
  v1::PlanProto p;
  if (!p.ParseFromString(r.slice())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan slice from refitd (", r.slice().size(),
        " bytes) is not a PlanProto"));
  }
  return p;
}

absl::Status RefitClient::AwaitOutcome(int64_t version, absl::Time deadline,
                                       int32_t attempt, const absl::Notification* stop) {
  if (attempt <= 0) attempt = std::max(1, RoundAttempt(version));
  const std::pair<int64_t, int32_t> key(version, attempt);
  absl::MutexLock l(&mu_);
  auto ready = [this, &key, stop]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outcomes_.count(key) > 0 || stream_broken_ || stopping_ ||
           (stop != nullptr && stop->HasBeenNotified());
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  auto it = outcomes_.find(key);
  if (it != outcomes_.end()) return it->second;
  if (stream_broken_ || stopping_) return absl::UnavailableError(stream_error_);
  if (stop != nullptr && stop->HasBeenNotified()) {
    return absl::CancelledError(absl::StrCat("no longer waiting for round ", version));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no outcome of round ", version, " before the deadline"));
}

absl::Status RefitClient::AwaitStaged(int64_t version, absl::Time deadline, int32_t attempt,
                                      const absl::Notification* stop) {
  if (attempt <= 0) attempt = std::max(1, RoundAttempt(version));
  const std::pair<int64_t, int32_t> key(version, attempt);
  {
    absl::MutexLock l(&mu_);
    auto staged = [this, &key, stop]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return staged_.count(key) > 0 || outcomes_.count(key) > 0 || stream_broken_ ||
             stopping_ || (stop != nullptr && stop->HasBeenNotified());
    };
    mu_.AwaitWithDeadline(absl::Condition(&staged), deadline);
    if (staged_.count(key) > 0) return absl::OkStatus();
  }
  return AwaitOutcome(version, absl::Now(), attempt, stop);  // says which end came
}

void RefitClient::WakeWaiters() {
  absl::MutexLock l(&mu_);  // releasing it re-evaluates the waits' conditions
}

absl::StatusOr<RefitClient::EngineState> RefitClient::GetEngineState(
    const std::string& engine_id, absl::Time deadline) {
  v1::EngineStateRequest req;
  req.set_engine_id(engine_id);
  v1::EngineStateResponse resp;
  auto ctx = MakeContext(deadline);
  REFIT_RETURN_IF_ERROR(FromRpc(stub_->GetEngineState(ctx.get(), req, &resp)));
  return EngineState{resp.committed_version(), resp.torn_version()};
}

absl::Status RefitClient::Leave(absl::Time deadline) {
  {
    absl::MutexLock l(&mu_);
    if (left_) return absl::OkStatus();
  }
  v1::LeaveRequest req;
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  v1::LeaveResponse resp;
  auto ctx = MakeContext(deadline);
  {
    // refitd ends this member's stream and forgets it: expected now.
    absl::MutexLock l(&mu_);
    leaving_ = true;
  }
  const absl::Status s = FromRpc(stub_->Leave(ctx.get(), req, &resp));
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    leaving_ = false;
    return s;
  }
  StopThreads();
  ClientLog().info("left member={} refitd={}", member_id_, options_.target);
  absl::MutexLock l(&mu_);
  leaving_ = false;
  left_ = true;
  return absl::OkStatus();
}

absl::StatusOr<v1::StatusResponse> RefitClient::GetStatus(absl::Time deadline) {
  v1::StatusRequest req;
  v1::StatusResponse resp;
  auto ctx = MakeContext(deadline);
  REFIT_RETURN_IF_ERROR(FromRpc(stub_->GetStatus(ctx.get(), req, &resp)));
  return resp;
}

absl::Status RefitClient::KvSet(const std::string& key, const std::string& value,
                                absl::Time deadline) {
  v1::KvSetRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  v1::KvSetResponse resp;
  auto ctx = MakeContext(deadline);
  return FromRpc(stub_->KvSet(ctx.get(), req, &resp));
}

absl::StatusOr<std::string> RefitClient::KvGet(const std::string& key,
                                               absl::Time deadline) {
  v1::KvGetRequest req;
  req.set_key(key);
  req.set_wait(true);
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  v1::KvGetResponse resp;
  auto ctx = MakeContext(deadline);
  grpc::Status st = stub_->KvGet(ctx.get(), req, &resp);
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat("key ", key, " not set before the deadline"));
  }
  REFIT_RETURN_IF_ERROR(FromRpc(st));
  return resp.value();
}

}  // namespace refit
