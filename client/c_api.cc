// The C ABI over Member (see c_api.h). Every entry point catches
// everything: no exception and no status crosses the boundary other than
// as a code and refit_last_error().
#include "client/c_api.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/internal/c_abi.h"
#include "client/member.h"
#include "common/status_macros.h"
#include "layout/dtype.h"
#include "layout/side.h"
#include "nlohmann/json.hpp"

#ifdef REFIT_C_API_CUDA
#include "client/nccl_data_plane.h"
#include "client/pull_data_plane.h"
#endif

namespace refit {
namespace {

using internal_c_abi::Dup;
using internal_c_abi::NamedPointers;
using internal_c_abi::NeedMember;
using nlohmann::json;

absl::StatusOr<absl::Time> Deadline(double timeout_s) {
  if (!std::isfinite(timeout_s) || timeout_s < 0 || timeout_s > 1e7) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout ", timeout_s, " s: must be between 0 and 1e7 seconds"));
  }
  return absl::Now() + absl::Seconds(timeout_s);
}

const std::set<std::string>& KnownKeys() {
  static const auto* keys = new std::set<std::string>{
      "server",          "token",        "tls",         "root_ca_pem",
      "client_cert_pem", "client_key_pem", "tls_server_name", "job",
      "side",            "engine_id",    "rank",        "model",
      "convention",      "host_id",      "device",      "verify",
      "transport",       "job_key",      "staged",      "staging_bytes",
      "heartbeat_ms",    "rpc_timeout_s", "connect_timeout_s"};
  return *keys;
}

struct Parsed {
  MemberOptions options;
  bool verify = false;
  std::string transport;  // "", "nccl" or "pull" (GPU buffers)
  bool staged = false;    // engines: staged rounds
  int64_t staging_bytes = -1;
};

// Typed field readers: INVALID_ARGUMENT naming the option. `*found` is
// false for an absent (or null) optional option.
absl::Status Find(const json& j, const char* key, bool required,
                  json::const_iterator* it, bool* found) {
  *it = j.find(key);
  *found = *it != j.end() && !(*it)->is_null();
  if (!*found && required) {
    return absl::InvalidArgumentError(
        absl::StrCat("member option \"", key, "\" is required"));
  }
  return absl::OkStatus();
}

absl::Status GetString(const json& j, const char* key, std::string* out,
                       bool required) {
  json::const_iterator it;
  bool found = false;
  REFIT_RETURN_IF_ERROR(Find(j, key, required, &it, &found));
  if (!found) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("member option \"", key, "\" must be a string"));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetInt(const json& j, const char* key, int64_t lo, int64_t hi,
                    int64_t* out, bool required) {
  json::const_iterator it;
  bool found = false;
  REFIT_RETURN_IF_ERROR(Find(j, key, required, &it, &found));
  if (!found) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<int64_t>() < lo ||
      it->get<int64_t>() > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "member option \"", key, "\" must be an integer in [", lo, ", ", hi,
        "]"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetSeconds(const json& j, const char* key, double hi, absl::Duration* out) {
  json::const_iterator it;
  bool found = false;
  REFIT_RETURN_IF_ERROR(Find(j, key, /*required=*/false, &it, &found));
  if (!found) return absl::OkStatus();
  if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "member option \"", key, "\" must be a number of seconds in (0, ", hi, "]"));
  }
  *out = absl::Seconds(it->get<double>());
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const char* key, bool* out) {
  json::const_iterator it;
  bool found = false;
  REFIT_RETURN_IF_ERROR(Find(j, key, /*required=*/false, &it, &found));
  if (!found) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("member option \"", key, "\" must be true or false"));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

// `for_join`: the connection options are required too.
absl::StatusOr<Parsed> ParseOptions(const char* text, bool for_join) {
  if (text == nullptr) return absl::InvalidArgumentError("member options are null");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "member options must be a JSON object (e.g. {\"side\": \"trainer\", ...})");
  }
  for (const auto& [k, v] : j.items()) {
    if (KnownKeys().count(k) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown member option \"", k, "\"; known: ",
                       absl::StrJoin(KnownKeys(), ", ")));
    }
  }
  Parsed p;
  MemberOptions& o = p.options;
  std::string side;
  REFIT_RETURN_IF_ERROR(GetString(j, "side", &side, true));
  REFIT_ASSIGN_OR_RETURN(o.side,
                         AnnotateStatus(ParseSide(side), "member option \"side\""));
  int64_t rank = 0;
  REFIT_RETURN_IF_ERROR(GetInt(j, "rank", 0, 1 << 30, &rank, true));
  o.rank = static_cast<int32_t>(rank);
  REFIT_RETURN_IF_ERROR(GetString(j, "model", &o.model, true));
  REFIT_RETURN_IF_ERROR(GetString(j, "convention", &o.convention, true));
  REFIT_RETURN_IF_ERROR(GetString(j, "engine_id", &o.engine_id, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "job", &o.job, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "host_id", &o.host_id, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "device", &o.device, false));
  if (o.device != "cpu") {
    int gpu = -1;
    if (o.device.rfind("cuda:", 0) != 0 ||
        !absl::SimpleAtoi(o.device.substr(5), &gpu) || gpu < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "member option \"device\" is \"", o.device,
          "\"; expected \"cpu\" or \"cuda:N\""));
    }
  }
  RefitClient::Options& c = o.connection;
  REFIT_RETURN_IF_ERROR(GetString(j, "server", &c.target, for_join));
  REFIT_RETURN_IF_ERROR(GetString(j, "token", &c.bearer_token, false));
  REFIT_RETURN_IF_ERROR(GetBool(j, "tls", &c.use_tls));
  REFIT_RETURN_IF_ERROR(GetString(j, "root_ca_pem", &c.root_ca_pem, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "client_cert_pem", &c.client_cert_pem, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "client_key_pem", &c.client_key_pem, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "tls_server_name", &c.tls_server_name, false));
  REFIT_RETURN_IF_ERROR(GetString(j, "job_key", &c.job_key, false));
  int64_t heartbeat_ms = 1000, rpc_timeout_s = 10;
  REFIT_RETURN_IF_ERROR(GetInt(j, "heartbeat_ms", 10, 600000, &heartbeat_ms, false));
  REFIT_RETURN_IF_ERROR(GetInt(j, "rpc_timeout_s", 1, 3600, &rpc_timeout_s, false));
  c.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  c.rpc_timeout = absl::Seconds(rpc_timeout_s);
  REFIT_RETURN_IF_ERROR(GetSeconds(j, "connect_timeout_s", 3600, &c.connect_timeout));
  REFIT_RETURN_IF_ERROR(GetBool(j, "verify", &p.verify));
  REFIT_RETURN_IF_ERROR(GetBool(j, "staged", &p.staged));
  REFIT_RETURN_IF_ERROR(
      GetInt(j, "staging_bytes", -1, int64_t{1} << 50, &p.staging_bytes, false));
  if (p.staged && o.side != Side::kEngine) {
    return absl::InvalidArgumentError(
        "member option \"staged\" applies to engine members; trainers are unchanged");
  }
  REFIT_RETURN_IF_ERROR(GetString(j, "transport", &p.transport, false));
  if (p.transport == "ipc") p.transport = "pull";  // the pull path's earlier name
  if (!p.transport.empty() && p.transport != "nccl" && p.transport != "pull") {
    return absl::InvalidArgumentError(absl::StrCat(
        "member option \"transport\" is \"", p.transport,
        "\"; expected \"nccl\" or \"pull\" (\"ipc\" is accepted too)"));
  }
  if (!p.transport.empty() && o.device == "cpu") {
    return absl::InvalidArgumentError(
        "member option \"transport\" applies to GPU buffers (\"device\": \"cuda:N\"); "
        "host buffers move over Gloo");
  }
  return p;
}

absl::StatusOr<DataPlaneOptions> DataPlaneFor(const Parsed& p) {
  DataPlaneOptions d;
  d.segment_checksums = p.verify;
  d.staging.enabled = p.staged;
  d.staging.budget_bytes = p.staging_bytes;
  if (p.options.device == "cpu") return d;
#ifdef REFIT_C_API_CUDA
  int gpu = 0;
  (void)absl::SimpleAtoi(p.options.device.substr(5), &gpu);
  DataPlaneOptions n =
      p.transport == "pull" ? PullDataPlaneOptions(gpu, nullptr, p.staged)
                              : NcclDataPlaneOptions(gpu);
  n.segment_checksums = p.verify;
  n.staging.enabled = p.staged;
  n.staging.budget_bytes = p.staging_bytes;
  return n;
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "device ", p.options.device,
      ": this is the host build of the client library; load "
      "librefit_client_gpu.so for GPU buffers"));
#endif
}

}  // namespace
}  // namespace refit

using refit::internal_c_abi::Guard;

namespace refit {
namespace {

// A round call of the C ABI: `step` of round `version` on the member, its
// stats as JSON into *stats_json (when not null).
int RoundCall(const char* name, refit_member* member, int64_t version, double timeout_s,
              char** stats_json,
              absl::StatusOr<RunStats> (Member::*step)(int64_t, absl::Time)) {
  return Guard(name, [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(RunStats s, ((*member->m).*step)(version, deadline));
    if (stats_json != nullptr) {
      nlohmann::json j = {{"bytes_sent", s.bytes_sent},
                          {"bytes_received", s.bytes_received},
                          {"seconds", s.seconds},
                          {"peak_staging_bytes", s.peak_staging_bytes},
                          {"pause_seconds", s.pause_seconds}};
      *stats_json = Dup(j.dump());
    }
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace refit

extern "C" {

const char* refit_last_error(void) { return refit::internal_c_abi::LastError(); }

void refit_free(char* p) { std::free(p); }

const char* refit_build_info(void) {
#ifdef REFIT_C_API_CUDA
  return "refit-client 1 (host, cuda)";
#else
  return "refit-client 1 (host)";
#endif
}

int refit_expected_buffers(const char* options_json, char** buffers_json) {
  return Guard("refit_expected_buffers", [&]() -> absl::Status {
    if (buffers_json == nullptr) return absl::InvalidArgumentError("buffers_json is null");
    REFIT_ASSIGN_OR_RETURN(refit::Parsed p,
                           refit::ParseOptions(options_json, /*for_join=*/false));
    REFIT_ASSIGN_OR_RETURN(std::vector<refit::LocalBuffer> want,
                           refit::ExpectedBuffers(p.options));
    nlohmann::json out = nlohmann::json::array();
    for (const refit::LocalBuffer& b : want) {
      out.push_back({{"name", b.name},
                     {"shape", b.shape},
                     {"dtype", std::string(refit::DTypeName(b.dtype))},
                     {"bytes", b.byte_size}});
    }
    *buffers_json = refit::Dup(out.dump());
    return absl::OkStatus();
  });
}

int refit_member_join(const char* options_json, int32_t num_buffers,
                      const char* const* names, void* const* ptrs,
                      const int64_t* sizes, double timeout_s,
                      refit_member** member) {
  return Guard("refit_member_join", [&]() -> absl::Status {
    if (member == nullptr) return absl::InvalidArgumentError("member is null");
    *member = nullptr;
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(refit::Parsed p,
                           refit::ParseOptions(options_json, /*for_join=*/true));
    REFIT_ASSIGN_OR_RETURN(auto named, refit::NamedPointers(num_buffers, names, ptrs));
    if (num_buffers > 0 && sizes == nullptr) {
      return absl::InvalidArgumentError("buffer sizes are null");
    }
    std::map<std::string, refit::BufferRef> buffers;
    for (int32_t i = 0; i < num_buffers; ++i) {
      buffers[names[i]] = {static_cast<char*>(ptrs[i]), sizes[i]};
    }
    REFIT_ASSIGN_OR_RETURN(refit::DataPlaneOptions dp, refit::DataPlaneFor(p));
    REFIT_ASSIGN_OR_RETURN(
        std::unique_ptr<refit::Member> m,
        refit::Member::Join(std::move(p.options), std::move(buffers),
                            std::move(dp), deadline));
    *member = new refit_member{std::move(m)};
    return absl::OkStatus();
  });
}

int refit_refuse(const char* options_json, const char* reason, double timeout_s) {
  return Guard("refit_refuse", [&]() -> absl::Status {
    if (reason == nullptr) return absl::InvalidArgumentError("reason is null");
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(refit::Parsed p,
                           refit::ParseOptions(options_json, /*for_join=*/true));
    return refit::RefuseToJoin(p.options, reason, deadline);
  });
}

int refit_member_rejoin(refit_member* member, double timeout_s) {
  return Guard("refit_member_rejoin", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    return member->m->Rejoin(deadline);
  });
}

int refit_member_prepare(refit_member* member, double timeout_s,
                         char** info_json) {
  return Guard("refit_member_prepare", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_RETURN_IF_ERROR(member->m->Prepare(deadline));
    if (info_json != nullptr) {
      refit::DataPlaneMember& d = member->m->data_plane();
      nlohmann::json j = {{"member_id", member->m->member_id()},
                          {"fingerprint", d.fingerprint()},
                          {"global_rank", d.global_rank()},
                          {"global_world", d.global_world()}};
      *info_json = refit::Dup(j.dump());
    }
    return absl::OkStatus();
  });
}

int refit_member_plan_changed(refit_member* member) {
  if (!refit::NeedMember(member).ok()) return 0;
  return member->m->PlanChanged() ? 1 : 0;
}

int refit_member_start_round(refit_member* member, int64_t version,
                             double timeout_s) {
  return Guard("refit_member_start_round", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    return member->m->StartRound(version, deadline);
  });
}

int refit_member_start_next_round(refit_member* member, double timeout_s,
                                  int64_t* version) {
  return Guard("refit_member_start_next_round", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (version == nullptr) return absl::InvalidArgumentError("version is null");
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(*version, member->m->StartNextRound(deadline));
    return absl::OkStatus();
  });
}

int refit_member_wait_for_round(refit_member* member, double timeout_s,
                                int64_t* version) {
  return Guard("refit_member_wait_for_round", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (version == nullptr) return absl::InvalidArgumentError("version is null");
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(*version, member->m->WaitForRound(deadline));
    return absl::OkStatus();
  });
}

int refit_member_round_progress(refit_member* member, int64_t version, double timeout_s,
                                char** progress_json) {
  return Guard("refit_member_round_progress", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (progress_json == nullptr) return absl::InvalidArgumentError("progress_json is null");
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(refit::Member::RoundProgress p,
                           member->m->Progress(version, deadline));
    const nlohmann::json j = {{"version", version},   {"running", p.running},
                    {"seconds", p.seconds},       {"reported", p.reported},
                    {"members", p.members},       {"engine_bytes", p.engine_bytes},
                    {"engine_ranks", p.engine_ranks}, {"bytes", p.bytes},
                    {"planned_bytes", p.planned_bytes}, {"round_bytes", p.round_bytes},
                    {"round_planned_bytes", p.round_planned_bytes}};
    *progress_json = refit::Dup(j.dump());
    return absl::OkStatus();
  });
}

int refit_member_run_round(refit_member* member, int64_t version,
                           double timeout_s, char** stats_json) {
  return refit::RoundCall("refit_member_run_round", member, version, timeout_s, stats_json,
                          &refit::Member::RunRound);
}

int refit_member_receive_round(refit_member* member, int64_t version, double timeout_s,
                               char** stats_json) {
  return refit::RoundCall("refit_member_receive_round", member, version, timeout_s,
                          stats_json, &refit::Member::ReceiveRound);
}

int refit_member_apply_round(refit_member* member, int64_t version, double timeout_s,
                             char** stats_json) {
  return refit::RoundCall("refit_member_apply_round", member, version, timeout_s, stats_json,
                          &refit::Member::ApplyRound);
}

int refit_member_engine_state(refit_member* member, const char* engine_id,
                              double timeout_s, int64_t* committed,
                              int64_t* torn) {
  return Guard("refit_member_engine_state", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (engine_id == nullptr) return absl::InvalidArgumentError("engine_id is null");
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(refit::RefitClient::EngineState s,
                           member->m->client().GetEngineState(engine_id, deadline));
    if (committed != nullptr) *committed = s.committed;
    if (torn != nullptr) *torn = s.torn;
    return absl::OkStatus();
  });
}

int refit_member_current_version(refit_member* member, const char* engine_id,
                                 double timeout_s, int64_t* version) {
  return Guard("refit_member_current_version", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (engine_id == nullptr || version == nullptr) {
      return absl::InvalidArgumentError("engine_id or version is null");
    }
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(refit::RefitClient::EngineState s,
                           member->m->client().GetEngineState(engine_id, deadline));
    *version = s.committed;
    return absl::OkStatus();
  });
}

int refit_member_kv_set(refit_member* member, const char* key,
                        const char* value, double timeout_s) {
  return Guard("refit_member_kv_set", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (key == nullptr || value == nullptr) {
      return absl::InvalidArgumentError("key or value is null");
    }
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    return member->m->client().KvSet(key, value, deadline);
  });
}

int refit_member_kv_get(refit_member* member, const char* key,
                        double timeout_s, char** value) {
  return Guard("refit_member_kv_get", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    if (key == nullptr || value == nullptr) {
      return absl::InvalidArgumentError("key or value is null");
    }
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    REFIT_ASSIGN_OR_RETURN(std::string v, member->m->client().KvGet(key, deadline));
    *value = refit::Dup(v);
    return absl::OkStatus();
  });
}

int refit_member_leave(refit_member* member, double timeout_s) {
  return Guard("refit_member_leave", [&]() -> absl::Status {
    REFIT_RETURN_IF_ERROR(refit::NeedMember(member));
    REFIT_ASSIGN_OR_RETURN(absl::Time deadline, refit::Deadline(timeout_s));
    return member->m->client().Leave(deadline);
  });
}

void refit_member_close(refit_member* member) {
  try {
    delete member;
  } catch (...) {
  }
}

}  // extern "C"
