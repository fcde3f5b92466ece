// Member (see member.h).
#include "client/member.h"

#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/log.h"
#include "common/member_name.h"
#include "common/status_macros.h"
#include "exec/transport/wire_enums.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/split_advice.h"
#include "mapping/validate.h"

namespace refit {
namespace {

// The model as refitd receives it: a built-in name as is, the text of its
// config.json otherwise (a path, a directory, a Hugging Face id in the
// local cache).
absl::StatusOr<std::string> ModelForRegistration(const std::string& model) {
  if (BuiltinModelJson(model).ok()) return model;
  REFIT_ASSIGN_OR_RETURN(std::string path, NonBuiltinModelConfigPath(model));
  return ReadModelConfigFile(path);
}

// The layout of o's side, checked to hold o.rank.
absl::StatusOr<MappedSide> BuildSide(const MemberOptions& o) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(o.model));
  REFIT_ASSIGN_OR_RETURN(MappedSide side, BuildSideLayoutExplained(
                                             model, o.side == Side::kTrainer, o.convention));
  if (o.rank < 0 || o.rank >= side.layout.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside the world of ",
                     side.layout.world_size, " ranks of ", o.convention));
  }
  return side;
}

std::string Who(const MemberOptions& o) {
  return MemberName(o.side == Side::kTrainer, o.engine_id, o.rank);
}

// `error` (refitd refusing a registration or a plan) with the members
// refitd holds that sent no heartbeat for a while (at least 3 s and 3 of
// this member's heartbeat intervals): the likely cause of an error that
// names a member of an earlier run. Other errors are returned as they are.
absl::Status WithStaleMembers(absl::Status error, RefitClient& client,
                              const MemberOptions& o) {
  if (!absl::IsInvalidArgument(error) && !absl::IsFailedPrecondition(error)) {
    return error;
  }
  absl::StatusOr<v1::StatusResponse> status = client.GetStatus(
      absl::Now() + std::min(absl::Seconds(2), o.connection.rpc_timeout));
  if (!status.ok()) return error;
  const double quiet = std::max(3.0, 3 * absl::ToDoubleSeconds(o.connection.heartbeat_interval));
  std::string stale;
  for (const v1::MemberStatus& m : status->members()) {
    if (m.seconds_since_heartbeat() < quiet) continue;
    const v1::MemberIdentity& id = m.identity();
    absl::StrAppend(&stale, stale.empty() ? "" : ", ",
                    MemberName(id.side() == v1::SIDE_TRAINER, id.engine_id(), id.rank()),
                    " (host ", id.host_id(), ", no heartbeat for ",
                    absl::FormatDuration(absl::Seconds(
                        static_cast<int64_t>(m.seconds_since_heartbeat()))),
                    ")");
  }
  if (stale.empty()) return error;
  return absl::Status(
      error.code(),
      absl::StrCat(error.message(), "; refitd still holds ", stale,
                   ": a process of an earlier run that ended without close()? refitd "
                   "drops it after its --heartbeat_timeout_ms (try again then), or "
                   "restart refitd"));
}

// How long to wait for refitd's connection: the options' connect timeout
// (2 s by default), cut to what is left before `deadline`.
absl::Duration ConnectTimeout(const RefitClient::Options& o, absl::Time deadline) {
  return std::max(absl::ZeroDuration(),
                  std::min(o.connect_timeout, deadline - absl::Now()));
}

// The job, side, engine id and rank of `options` (the world size is set
// by the caller).
void SetIdentity(const MemberOptions& options, v1::MemberIdentity* id) {
  id->set_job(options.job);
  id->set_side(SideToProto(options.side));
  if (options.side == Side::kEngine) id->set_engine_id(options.engine_id);
  id->set_rank(options.rank);
}

}  // namespace

absl::StatusOr<std::vector<LocalBuffer>> ExpectedBuffers(
    const MemberOptions& options) {
  REFIT_ASSIGN_OR_RETURN(MappedSide side, BuildSide(options));
  return RankBuffers(side, options.rank);
}

absl::Status RefuseToJoin(const MemberOptions& options, const std::string& reason,
                          absl::Time deadline) {
  v1::Registration reg;
  v1::MemberIdentity* id = reg.mutable_identity();
  SetIdentity(options, id);
  // A member refusing because its convention does not map still names its
  // rank: the world is then the least that holds it.
  absl::StatusOr<MappedSide> side = BuildSide(options);
  id->set_world_size(side.ok() ? side->layout.world_size : options.rank + 1);
  char name[256] = {0};
  id->set_host_id(!options.host_id.empty()                       ? options.host_id
                  : gethostname(name, sizeof(name) - 1) == 0 ? name
                                                              : "localhost");
  id->set_device(options.device);
  reg.set_convention(options.convention);
  RefitClient::Options co = options.connection;
  co.connect_timeout = ConnectTimeout(co, deadline);
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<RefitClient> client,
                         AnnotateStatus(RefitClient::Connect(co), Who(options)));
  return AnnotateStatus(client->Refuse(reg, reason, deadline), Who(options));
}

absl::StatusOr<std::unique_ptr<Member>> Member::Join(
    MemberOptions options, std::map<std::string, BufferRef> buffers,
    DataPlaneOptions data_plane, absl::Time deadline) {
  const std::string who = Who(options);
  if (options.side == Side::kEngine && options.engine_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": an engine member needs an engine_id"));
  }
  // Only this rank's part of the side is kept: the whole side of a large
  // model and world takes tens to hundreds of MB (tools/dev:
  // rank_layout_memory), given back to the system here.
  REFIT_ASSIGN_OR_RETURN(MappedSide whole, AnnotateStatus(BuildSide(options), who));
  const int32_t world = whole.layout.world_size;
  MappedSide side = RankOnly(std::move(whole), options.rank);
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  const std::vector<LocalBuffer> expected = RankBuffers(side, options.rank);

  // Names and byte sizes are the caller's; shapes and dtypes of known names
  // are the layout's (a torch tensor's shape may legitimately be a view).
  std::map<std::string, const LocalBuffer*> by_name;
  for (const LocalBuffer& b : expected) by_name[b.name] = &b;
  std::vector<LocalBuffer> given;
  std::vector<std::string> null_addresses;
  for (const auto& [name, ref] : buffers) {
    LocalBuffer b;
    b.name = name;
    b.byte_size = ref.byte_size;
    auto it = by_name.find(name);
    if (it != by_name.end()) {
      b.shape = it->second->shape;
      b.dtype = it->second->dtype;
    }
    given.push_back(std::move(b));
    if (ref.data == nullptr && ref.byte_size > 0) {
      null_addresses.push_back(absl::StrCat(who, ": parameter ", name,
                                            ": the buffer's address is null"));
    }
  }
  absl::Status valid = ValidateRankBuffers(side, options.rank, given);
  if (!valid.ok() || !null_addresses.empty()) {
    std::string msg(valid.message());
    for (const std::string& n : null_addresses) {
      absl::StrAppend(&msg, msg.empty() ? "" : "\n", n);
    }
    return absl::InvalidArgumentError(msg);
  }

  v1::Registration reg;
  v1::MemberIdentity* id = reg.mutable_identity();
  SetIdentity(options, id);
  id->set_world_size(world);
  std::string host = options.host_id;
  if (host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  id->set_host_id(host);
  id->set_device(options.device);
  if (options.device != "cpu") id->set_device_uuid(data_plane.device_uuid);
  id->set_transport(TransportToProto(data_plane.transport_kind));
  reg.set_staged(options.side == Side::kEngine && data_plane.staging.enabled);
  REFIT_ASSIGN_OR_RETURN(std::string model, ModelForRegistration(options.model));
  reg.set_model_config(model);
  reg.set_convention(options.convention);
  for (const LocalBuffer& lb : expected) {
    v1::LocalBuffer* b = reg.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }

  std::unique_ptr<Member> m(new Member());
  m->options_ = std::move(options);
  m->side_ = std::move(side);
  m->buffers_ = std::move(buffers);
  RefitClient::Options co = m->options_.connection;
  co.connect_timeout = ConnectTimeout(co, deadline);
  REFIT_ASSIGN_OR_RETURN(m->client_,
                         AnnotateStatus(RefitClient::Connect(co), who));
  absl::StatusOr<std::string> registered = m->client_->Register(reg);
  if (!registered.ok()) {
    return AnnotateStatus(
        WithStaleMembers(registered.status(), *m->client_, m->options_), who);
  }
  m->member_id_ = *std::move(registered);
  std::map<std::string, char*> ptrs;
  for (const auto& [name, ref] : m->buffers_) ptrs[name] = ref.data;
  REFIT_ASSIGN_OR_RETURN(
      m->data_plane_,
      DataPlaneMember::Create(m->client_.get(), std::move(ptrs),
                              std::move(data_plane)));
  return m;
}

absl::Status Member::Rejoin(absl::Time deadline) {
  REFIT_RETURN_IF_ERROR(AnnotateStatus(client_->Rejoin(deadline), Who(options_)));
  member_id_ = client_->member_id();
  return absl::OkStatus();
}

Member::~Member() {
  if (client_ != nullptr && !member_id_.empty()) {  // registered
    const absl::Status left = client_->Leave(
        absl::Now() + std::min(absl::Seconds(2), options_.connection.rpc_timeout));
    if (!left.ok()) {
      ClientLog().info("leaving on close failed member={} reason={}", member_id_,
                       left.ToString());
    }
  }
}

absl::Status Member::Prepare(absl::Time deadline) {
  return AnnotateStatus(
      WithStaleMembers(data_plane_->Prepare(deadline), *client_, options_),
      Who(options_));
}

absl::StatusOr<int64_t> Member::StartWithRetries(
    const std::function<absl::StatusOr<int64_t>()>& start, absl::Time deadline) {
  absl::StatusOr<int64_t> s = start();
  while (absl::IsUnavailable(s.status()) && absl::Now() < deadline) {
    // refitd's own UNAVAILABLE (a plan being built, a stream not up yet)
    // is retried; a refitd that is gone fails within the connect timeout.
    REFIT_RETURN_IF_ERROR(client_->CheckReachable(deadline));
    absl::SleepFor(absl::Milliseconds(20));
    s = start();
  }
  return s;
}

absl::Status Member::StartRound(int64_t version, absl::Time deadline) {
  absl::StatusOr<int64_t> s = StartWithRetries(
      [&]() -> absl::StatusOr<int64_t> {
        REFIT_RETURN_IF_ERROR(client_->StartRound(version, deadline));
        return version;
      },
      deadline);
  return AnnotateStatus(s.status(), absl::StrCat(Who(options_), ": round ", version));
}

absl::StatusOr<int64_t> Member::StartNextRound(absl::Time deadline) {
  return AnnotateStatus(
      StartWithRetries([&] { return client_->StartNextRound(deadline); }, deadline),
      absl::StrCat(Who(options_), ": the next round"));
}

absl::StatusOr<Member::RoundProgress> Member::Progress(int64_t version,
                                                      absl::Time deadline) {
  REFIT_ASSIGN_OR_RETURN(v1::StatusResponse status,
                         AnnotateStatus(client_->GetStatus(deadline), Who(options_)));
  RoundProgress p;
  for (const v1::RoundSummary& s : status.rounds()) {
    if (s.version() != version || s.outcome() != "running") continue;
    p.running = true;
    p.seconds = s.seconds();
    p.reported = s.reported_size();
    p.members = s.reported_size() + s.waiting_size();
    p.engine_bytes = s.engine_bytes();
    p.engine_ranks = s.engine_ranks();
    for (const v1::MemberBytes& b : s.live()) {
      if (b.member_id() == client_->member_id()) {
        p.bytes = b.bytes();
        p.planned_bytes = b.planned_bytes();
      }
      if (b.engine()) {
        p.round_bytes += b.bytes();
        p.round_planned_bytes += b.planned_bytes();
      }
    }
  }
  return p;
}

absl::StatusOr<int64_t> Member::WaitForRound(absl::Time deadline) {
  return AnnotateStatus(client_->WaitForRound(deadline), Who(options_));
}

absl::StatusOr<RunStats> Member::RunRound(int64_t version, absl::Time deadline) {
  return AnnotateStatus(data_plane_->RunRound(version, deadline),
                        absl::StrCat(Who(options_), ": round ", version));
}

absl::StatusOr<RunStats> Member::ReceiveRound(int64_t version, absl::Time deadline) {
  return AnnotateStatus(data_plane_->ReceiveRound(version, deadline),
                        absl::StrCat(Who(options_), ": round ", version));
}

absl::StatusOr<RunStats> Member::ApplyRound(int64_t version, absl::Time deadline) {
  return AnnotateStatus(data_plane_->ApplyRound(version, deadline),
                        absl::StrCat(Who(options_), ": round ", version));
}

}  // namespace refit
