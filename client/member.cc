// Member (see member.h).
#include "client/member.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/wire_enums.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "mapping/validate.h"

namespace refit {
namespace {

// The model as refitd receives it: a built-in name as is, a file's text.
absl::StatusOr<std::string> ModelForRegistration(const std::string& model) {
  if (BuiltinModelJson(model).ok()) return model;
  std::ifstream in(model);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "model ", model, " is neither a built-in model nor a readable file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct RankSide {
  MappedSide mapped;
  int32_t world = 0;
};

absl::StatusOr<RankSide> BuildSide(const MemberOptions& o) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(o.model));
  RankSide s;
  if (o.side == Side::kTrainer) {
    REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(o.convention));
    s.world = ts.world_size();
    REFIT_ASSIGN_OR_RETURN(s.mapped, BuildTrainerLayout(model, ts));
  } else {
    REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(o.convention));
    s.world = es.world_size();
    REFIT_ASSIGN_OR_RETURN(s.mapped, BuildEngineLayout(model, es));
  }
  if (o.rank < 0 || o.rank >= s.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside the world of ", s.world,
                     " ranks of ", o.convention));
  }
  return s;
}

std::string Who(const MemberOptions& o) {
  return o.side == Side::kTrainer
             ? absl::StrCat("trainer rank ", o.rank)
             : absl::StrCat("engine ", o.engine_id, " rank ", o.rank);
}

}  // namespace

absl::StatusOr<std::vector<LocalBuffer>> ExpectedBuffers(
    const MemberOptions& options) {
  REFIT_ASSIGN_OR_RETURN(RankSide s, BuildSide(options));
  return RankBuffers(s.mapped, options.rank);
}

absl::StatusOr<std::unique_ptr<Member>> Member::Join(
    MemberOptions options, std::map<std::string, BufferRef> buffers,
    DataPlaneOptions data_plane, absl::Time deadline) {
  const std::string who = Who(options);
  if (options.side == Side::kEngine && options.engine_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": an engine member needs an engine_id"));
  }
  REFIT_ASSIGN_OR_RETURN(RankSide side, AnnotateStatus(BuildSide(options), who));
  const std::vector<LocalBuffer> expected = RankBuffers(side.mapped, options.rank);

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
  absl::Status valid = ValidateRankBuffers(side.mapped, options.rank, given);
  if (!valid.ok() || !null_addresses.empty()) {
    std::string msg(valid.message());
    for (const std::string& n : null_addresses) {
      absl::StrAppend(&msg, msg.empty() ? "" : "\n", n);
    }
    return absl::InvalidArgumentError(msg);
  }

  v1::Registration reg;
  v1::MemberIdentity* id = reg.mutable_identity();
  id->set_job(options.job);
  id->set_side(SideToProto(options.side));
  if (options.side == Side::kEngine) id->set_engine_id(options.engine_id);
  id->set_rank(options.rank);
  id->set_world_size(side.world);
  std::string host = options.host_id;
  if (host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  id->set_host_id(host);
  id->set_device(options.device);
  if (options.device != "cpu") id->set_device_uuid(data_plane.device_uuid);
  id->set_transport(TransportToProto(data_plane.transport_kind));
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
  m->side_ = std::move(side.mapped);
  m->buffers_ = std::move(buffers);
  RefitClient::Options co = m->options_.connection;
  co.connect_timeout =
      std::max(absl::ZeroDuration(), deadline - absl::Now());
  REFIT_ASSIGN_OR_RETURN(m->client_,
                         AnnotateStatus(RefitClient::Connect(co), who));
  REFIT_ASSIGN_OR_RETURN(m->member_id_,
                         AnnotateStatus(m->client_->Register(reg), who));
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

absl::Status Member::Prepare(absl::Time deadline) {
  return AnnotateStatus(data_plane_->Prepare(deadline), Who(options_));
}

absl::Status Member::StartRound(int64_t version, absl::Time deadline) {
  absl::Status s = client_->StartRound(version, deadline);
  while (absl::IsUnavailable(s) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    s = client_->StartRound(version, deadline);
  }
  return AnnotateStatus(s, absl::StrCat(Who(options_), ": round ", version));
}

absl::StatusOr<int64_t> Member::WaitForRound(absl::Time deadline) {
  return AnnotateStatus(client_->WaitForRound(deadline), Who(options_));
}

absl::StatusOr<RunStats> Member::RunRound(int64_t version, absl::Time deadline) {
  return AnnotateStatus(data_plane_->RunRound(version, deadline),
                        absl::StrCat(Who(options_), ": round ", version));
}

absl::StatusOr<HostBuffers> Member::PatternBuffers(
    const std::map<std::string, char*>& host) const {
  for (const auto& [name, p] : host) {
    if (buffers_.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(options_), ": no registered buffer is named ", name));
    }
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(options_), ": the host copy of ", name, " is null"));
    }
  }
  HostBuffers ptrs(side_.layout.buffers.size(), nullptr);
  for (int32_t b = side_.rank_begin[options_.rank];
       b < side_.rank_begin[options_.rank + 1]; ++b) {
    const std::string& name = side_.layout.buffers[b].name;
    auto h = host.find(name);
    if (h != host.end()) {
      ptrs[b] = reinterpret_cast<uint8_t*>(h->second);
      continue;
    }
    if (options_.device != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(options_), ": buffer ", name, " is in ", options_.device,
          " memory; give a host copy of it"));
    }
    ptrs[b] = reinterpret_cast<uint8_t*>(buffers_.at(name).data);
  }
  return ptrs;
}

absl::Status Member::FillPattern(int64_t version,
                                 const std::map<std::string, char*>& host) const {
  REFIT_ASSIGN_OR_RETURN(HostBuffers ptrs, PatternBuffers(host));
  refit::FillPattern(side_.layout, ptrs,
                     {options_.rank, static_cast<uint64_t>(version)});
  return absl::OkStatus();
}

absl::Status Member::CheckPattern(int64_t version,
                                  const std::map<std::string, char*>& host) const {
  REFIT_ASSIGN_OR_RETURN(HostBuffers ptrs, PatternBuffers(host));
  return AnnotateStatus(
      refit::CheckPattern(side_.layout, ptrs,
                          {options_.rank, static_cast<uint64_t>(version)}),
      Who(options_));
}

}  // namespace refit
