// `refit status` implementation (see status_command.h).
#include "cli/status_command.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/refit_client.h"
#include "common/file.h"
#include "common/printable.h"
#include "common/round_bytes.h"
#include "common/status_macros.h"
#include "exec/transport/wire_enums.h"
#include "nlohmann/json.hpp"
#include "cli/status_watch.h"

namespace refit {
namespace {

// A bearer token file holds one line.
constexpr int64_t kMaxTokenFileBytes = int64_t{1} << 20;

// "trainer" or "engine"; "?" for a side this build does not know.
std::string WireSideName(v1::Side side) {
  absl::StatusOr<Side> s = SideFromProto(side, "identity.side");
  return s.ok() ? std::string(SideName(*s)) : "?";
}

// "gloo", "nccl", "pull"; "" when unspecified, "?" for a value this build
// does not know.
std::string WireTransportName(v1::Transport t) {
  if (t == v1::TRANSPORT_UNSPECIFIED) return "";
  absl::StatusOr<TransportKind> k = TransportFromProto(t, "identity.transport");
  return k.ok() ? std::string(TransportKindName(*k)) : "?";
}

int FirstRound(const v1::StatusResponse& r, int rounds) {
  return std::max(0, r.rounds_size() - std::max(0, rounds));
}

}  // namespace

std::string FormatStatusText(const v1::StatusResponse& r, int rounds) {
  std::string out = absl::StrCat("members: ", r.members_size(), "\n");
  for (const v1::MemberStatus& m : r.members()) {
    const v1::MemberIdentity& id = m.identity();
    absl::StrAppendFormat(
        &out, "  %s  %s job=%s%s rank=%d/%d host=%s device=%s%s buffers=%d "
              "heartbeat %.1f s ago\n",
        Printable(m.member_id()), WireSideName(id.side()), Printable(id.job()),
        id.engine_id().empty() ? "" : absl::StrCat(" engine=", Printable(id.engine_id())),
        id.rank(), id.world_size(), Printable(id.host_id()), Printable(id.device()),
        id.transport() == v1::TRANSPORT_UNSPECIFIED
            ? ""
            : absl::StrCat(" transport=", WireTransportName(id.transport())),
        m.num_buffers(), m.seconds_since_heartbeat());
  }
  absl::StrAppend(&out, "refit protocol: ", r.protocol_version(), "\n");
  absl::StrAppend(&out, "membership epoch: ", r.epoch(), "\n");
  absl::StrAppend(&out, "plan fingerprint: ",
                  r.plan_fingerprint().empty() ? "(no plan)"
                                               : Printable(r.plan_fingerprint()),
                  "\n");
  if (!r.plan_error().empty()) {
    absl::StrAppend(&out, "plan error: ", Printable(r.plan_error()), "\n");
  }
  for (const std::string& refusal : r.refusals()) {
    absl::StrAppend(&out, "refused to join: ", Printable(refusal), "\n");
  }
  if (r.pull_pairs() + r.network_pairs() > 0) {
    absl::StrAppend(&out, "pairs (trainer, engine): ", r.pull_pairs(),
                    " on the pull path (same host), ", r.network_pairs(),
                    " on the network transport\n");
  }
  for (const v1::EngineStatus& e : r.engines()) {
    absl::StrAppend(&out, "engine ", Printable(e.engine_id()), ": ",
                    e.committed_version() == 0
                        ? std::string("no version committed")
                        : absl::StrCat("version ", e.committed_version(), " committed"),
                    e.torn_version() == 0
                        ? std::string()
                        : absl::StrCat("; TORN by aborted round ", e.torn_version(),
                                       ": holds no single version until a round commits"),
                    e.verified_version() == 0
                        ? std::string()
                        : absl::StrCat("; version ", e.verified_version(), " verified"),
                    "\n");
  }
  if (r.rounds_size() == 0) {
    absl::StrAppend(&out, "rounds: none\n");
    return out;
  }
  const int first = FirstRound(r, rounds);
  absl::StrAppend(&out, "rounds (last ", r.rounds_size() - first, " of ",
                  r.rounds_size(), "):\n",
                  "  (bytes: what one engine rank received; seconds: the slowest "
                  "member's data plane; GB/s = bytes / seconds, GB = 1e9)\n");
  absl::StrAppendFormat(&out, "  %8s  %-10s %10s %10s %12s %14s\n", "version",
                        "outcome", "bytes", "seconds", "GB/s", "peak staging");
  for (int i = first; i < r.rounds_size(); ++i) {
    const v1::RoundSummary& s = r.rounds(i);
    absl::StrAppendFormat(&out, "  %8d  %-10s %10s %10.3f %12.2f %14s%s%s%s\n",
                          s.version(), Printable(s.outcome()), HumanBytes(s.bytes()), s.seconds(),
                          s.bytes_per_second() / 1e9, HumanBytes(s.peak_staging_bytes()),
                          s.peak_staging_member().empty()
                              ? ""
                              : "  (" + Printable(s.peak_staging_member()) + ")",
                          s.pause_member().empty()
                              ? ""
                              : absl::StrFormat("  engine pause %.1f ms (%s)",
                                                s.pause_seconds() * 1e3,
                                                Printable(s.pause_member())),
                          s.reason().empty() ? "" : "  " + Printable(s.reason()));
  }
  return out;
}

std::string FormatStatusJson(const v1::StatusResponse& r, int rounds) {
  nlohmann::json j;
  j["members"] = nlohmann::json::array();
  for (const v1::MemberStatus& m : r.members()) {
    const v1::MemberIdentity& id = m.identity();
    j["members"].push_back({{"member_id", m.member_id()},
                            {"side", WireSideName(id.side())},
                            {"job", id.job()},
                            {"engine_id", id.engine_id()},
                            {"rank", id.rank()},
                            {"world_size", id.world_size()},
                            {"host_id", id.host_id()},
                            {"device", id.device()},
                            {"device_uuid", id.device_uuid()},
                            {"transport", WireTransportName(id.transport())},
                            {"num_buffers", m.num_buffers()},
                            {"seconds_since_heartbeat",
                             m.seconds_since_heartbeat()}});
  }
  j["protocol_version"] = r.protocol_version();
  j["epoch"] = r.epoch();
  j["plan_fingerprint"] = r.plan_fingerprint();
  j["plan_error"] = r.plan_error();
  j["refusals"] = nlohmann::json::array();
  for (const std::string& refusal : r.refusals()) j["refusals"].push_back(refusal);
  j["pairs"] = {{"pull", r.pull_pairs()}, {"network", r.network_pairs()}};
  j["engines"] = nlohmann::json::array();
  for (const v1::EngineStatus& e : r.engines()) {
    j["engines"].push_back({{"engine_id", e.engine_id()},
                            {"committed_version", e.committed_version()},
                            {"torn_version", e.torn_version()},
                            {"verified_version", e.verified_version()}});
  }
  j["rounds"] = nlohmann::json::array();
  for (int i = FirstRound(r, rounds); i < r.rounds_size(); ++i) {
    const v1::RoundSummary& s = r.rounds(i);
    nlohmann::json reports = nlohmann::json::array();
    for (const v1::MemberReport& m : s.reports()) {
      reports.push_back({{"member_id", m.member_id()},
                         {"bytes", m.bytes()},
                         {"seconds", m.seconds()},
                         {"peak_staging_bytes", m.peak_staging_bytes()},
                         {"digest_seconds", m.digest_seconds()}});
    }
    nlohmann::json live = nlohmann::json::array();
    for (const v1::MemberBytes& b : s.live()) {
      live.push_back({{"member_id", b.member_id()},
                      {"bytes", b.bytes()},
                      {"planned_bytes", b.planned_bytes()},
                      {"engine", b.engine()},
                      {"reported", b.reported()}});
    }
    j["rounds"].push_back({{"version", s.version()},
                           {"outcome", s.outcome()},
                           {"reason", s.reason()},
                           {"bytes", s.bytes()},
                           {"seconds", s.seconds()},
                           {"duration_seconds", s.duration_seconds()},
                           {"bytes_per_second", s.bytes_per_second()},
                           {"engine_ranks", s.engine_ranks()},
                           {"engine_bytes", s.engine_bytes()},
                           {"peak_staging_bytes", s.peak_staging_bytes()},
                           {"peak_staging_member", s.peak_staging_member()},
                           {"pause_seconds", s.pause_seconds()},
                           {"pause_member", s.pause_member()},
                           {"reports", reports},
                           {"live", live}});
  }
  // Text from peers (reasons, refusals) may hold bytes that are not UTF-8.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

// Returns a client connected to opt.server with opt's token and timeout.
absl::StatusOr<std::unique_ptr<RefitClient>> ConnectForStatus(
    const StatusCommandOptions& opt) {
  if (opt.server.empty()) {
    return absl::InvalidArgumentError("--server is required (host:port)");
  }
  RefitClient::Options co;
  co.target = opt.server;
  // A stopped refitd is named within the client's connect timeout (2 s).
  co.connect_timeout = std::min(opt.timeout, co.connect_timeout);
  co.rpc_timeout = std::min(opt.timeout, absl::Seconds(10));
  REFIT_RETURN_IF_ERROR(ApplyClientTls(opt.tls, &co));
  if (!opt.token_file.empty()) {
    REFIT_ASSIGN_OR_RETURN(
        std::string token,
        AnnotateStatus(ReadFileToString(opt.token_file, kMaxTokenFileBytes),
                       "--token_file"));
    co.bearer_token = std::string(absl::StripAsciiWhitespace(token));
  }
  absl::StatusOr<std::unique_ptr<RefitClient>> client = RefitClient::Connect(co);
  if (!client.ok()) {
    return AnnotateStatus(client.status(), absl::StrCat("connecting to ", opt.server));
  }
  return client;
}

}  // namespace

absl::StatusOr<std::string> RunStatusCommand(const StatusCommandOptions& opt) {
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<RefitClient> client, ConnectForStatus(opt));
  absl::StatusOr<v1::StatusResponse> st = client->GetStatus(absl::Now() + opt.timeout);
  if (!st.ok()) {
    return AnnotateStatus(st.status(),
                          absl::StrCat("GetStatus from ", opt.server));
  }
  return opt.json ? FormatStatusJson(*st, opt.rounds)
                  : FormatStatusText(*st, opt.rounds);
}

absl::StatusOr<v1::RoundSummary> RunStatusWatch(
    const StatusCommandOptions& opt, absl::Duration interval, bool clear_screen,
    const std::function<void(const std::string&)>& show) {
  const absl::Time deadline = absl::Now() + opt.timeout;
  REFIT_ASSIGN_OR_RETURN(std::unique_ptr<RefitClient> client, ConnectForStatus(opt));
  auto get = [&](absl::Time d) -> absl::StatusOr<v1::StatusResponse> {
    absl::StatusOr<v1::StatusResponse> st = client->GetStatus(d);
    if (!st.ok()) {
      return AnnotateStatus(st.status(), absl::StrCat("GetStatus from ", opt.server));
    }
    return st;
  };
  if (!opt.follow) return WatchRounds(get, show, opt.server, interval, deadline, clear_screen);
  v1::RoundSummary last;
  auto get_and_note = [&](absl::Time d) -> absl::StatusOr<v1::StatusResponse> {
    absl::StatusOr<v1::StatusResponse> st = get(d);
    if (st.ok()) {
      if (const v1::RoundSummary* done = FinishedRoundAfter(*st, last.version())) last = *done;
    }
    return st;
  };
  REFIT_RETURN_IF_ERROR(
      FollowRounds(get_and_note, show, opt.server, interval, deadline, clear_screen).status());
  return last;
}

}  // namespace refit
