// Relay checks over any data plane: see relay_checks.h.
#include "testing/relay_checks.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "job/job_plan.h"
#include "mapping/mapping.h"
#include "plan/planner.h"

namespace refit {
namespace testing {
namespace {

// The plan's first relay message (PlanWithRelays makes sure there is one).
const Message& FirstRelay(const Plan& plan) {
  for (const Message& m : plan.messages) {
    if (m.relay) return m;
  }
  return plan.messages.front();
}

// Bytes the plan's relays forward.
int64_t Forwarded(const Plan& plan) {
  int64_t n = 0;
  for (int64_t b : plan.stats.bytes_forwarded) n += b;
  return n;
}

// "" when round `r` committed with every engine byte right, else why not.
std::string Committed(MemberRounds& rounds, const MemberRound& r, const char* what) {
  if (!r.commit.ok()) {
    std::string why = absl::StrCat(what, ": ", r.commit.ToString());
    for (size_t g = 0; g < r.status.size(); ++g) {
      if (!r.status[g].ok()) absl::StrAppend(&why, "\n  global rank ", g, ": ", r.status[g].ToString());
    }
    return why;
  }
  const std::string wrong = rounds.CheckEngines();
  return wrong.empty() ? "" : absl::StrCat(what, ": ", wrong);
}

std::unique_ptr<MemberRounds> Rounds(const MemberKit& kit, const RelayCase& c, bool delta) {
  absl::StatusOr<Plan> plan =
      PlanWithRelays(c.model, c.trainer_spec, c.engine_spec, c.lanes, c.budget, delta);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<MemberRounds>> r =
      MemberRounds::Create(std::move(*plan), kit, delta);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// Whether `text` names global rank `rank` as the transports do ("rank 3",
// or in a list "peer rank(s) 0, 3", "(peers 0, 3)"; not a side's own
// numbering, "engine rank 3").
bool NamesRank(absl::string_view text, int32_t rank) {
  for (absl::string_view lead : {"rank ", "rank(s) ", "peers "}) {
    for (size_t at = text.find(lead); at != absl::string_view::npos;
         at = text.find(lead, at + 1)) {
      const absl::string_view before = text.substr(0, at);
      if (absl::EndsWith(before, "engine ") || absl::EndsWith(before, "trainer ")) continue;
      absl::string_view rest = text.substr(at + lead.size());
      while (!rest.empty()) {
        size_t digits = 0;
        while (digits < rest.size() && absl::ascii_isdigit(rest[digits])) ++digits;
        if (digits == 0) break;
        int32_t n = 0;
        if (absl::SimpleAtoi(rest.substr(0, digits), &n) && n == rank) return true;
        rest.remove_prefix(digits);
        if (!absl::ConsumePrefix(&rest, ", ")) break;
      }
    }
  }
  return false;
}

// Whether the error of global rank `g` names global rank `relay`, itself
// or through the ranks it names (a rank that waited on a peer blocked by
// the relay names that peer, whose error names the relay: on a device
// transport a sender's later sends queue behind its send to a stopped
// relay).
bool BlamesRelay(const MemberRound& r, int32_t g, int32_t relay) {
  std::vector<bool> seen(r.status.size(), false);
  std::vector<int32_t> todo = {g};
  seen[g] = true;
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    if (NamesRank(r.status[x].message(), relay)) return true;
    for (int32_t y = 0; y < static_cast<int32_t>(r.status.size()); ++y) {
      if (!seen[y] && !r.status[y].ok() && NamesRank(r.status[x].message(), y)) {
        seen[y] = true;
        todo.push_back(y);
      }
    }
  }
  return false;
}

// A relay that stops (`how`) in a round of 1% changed words: "" when the
// round did not commit, ended within its deadline plus 10 s, and failed
// the rank the relay feeds with an error that names the relay's global
// rank (BlamesRelay); then the next round committed with every engine
// byte right.
std::string StoppedRelay(MemberRounds& rounds, RankStop how) {
  const Plan& plan = rounds.plan();
  const Message& relay = FirstRelay(plan);
  const int32_t ws = plan.src.world_size;
  const int32_t stopped = ws + relay.src_rank, fed = ws + relay.dst_rank;
  const std::string what = how == RankStop::kStalled ? "a stalled relay" : "a cancelled relay";
  rounds.Change(0.01);
  const absl::Duration timeout = absl::Seconds(3);
  const MemberRound r = rounds.Run(timeout, stopped, how);
  if (r.commit.ok()) return absl::StrCat("the round with ", what, " committed");
  if (r.took > timeout + absl::Seconds(10)) {
    return absl::StrCat("the round with ", what, " took ", absl::FormatDuration(r.took));
  }
  const absl::Status& st = r.status[fed];
  if (st.ok()) return absl::StrCat(what, ": the rank it feeds (global ", fed, ") did not fail");
  if (!BlamesRelay(r, fed, stopped)) {
    std::string all;
    for (size_t g = 0; g < r.status.size(); ++g) {
      absl::StrAppend(&all, "\n  global rank ", g, ": ", r.status[g].ToString());
    }
    return absl::StrCat(what, ": the error of the rank it feeds (global ", fed,
                        ") does not lead to global rank ", stopped, ":", all);
  }
  rounds.Change(0.01);
  return Committed(rounds, rounds.Run(absl::Seconds(20)), "the round after");
}

}  // namespace

namespace {

// PlanWithRelays' plan of engines of several layouts (`engine_spec` with
// ';'), all on host 1, the trainer on host 0.
absl::StatusOr<Plan> PlanEnginesOnOneHost(const ModelConfig& config, const TrainerSpec& ts,
                                          const std::string& engine_spec,
                                          const PlannerOptions& po) {
  std::vector<JobEngine> engines;
  int32_t engine_world = 0;
  for (absl::string_view one : absl::StrSplit(engine_spec, ';')) {
    REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(std::string(one)));
    engines.push_back(JobEngine{absl::StrCat("engine", engines.size()), es});
    engine_world += es.world_size();
  }
  REFIT_ASSIGN_OR_RETURN(JobLayouts layouts, MapJob(config, ts, engines));
  const int32_t per_host = std::max(ts.world_size(), engine_world);
  return PlanJob(std::move(layouts), engines,
                 ShorthandPlacement(ts.world_size(), engine_world, per_host, false), po);
}

// PlanWithRelays' plan of one engine, its replica i on host 1 + i.
absl::StatusOr<Plan> PlanReplicasOnHostsOfTheirOwn(const ModelConfig& config,
                                                   const TrainerSpec& ts,
                                                   const std::string& engine_spec,
                                                   const PlannerOptions& po) {
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(engine_spec));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(config, ts));
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(config, es));
  src.layout.host_of_rank.assign(src.layout.world_size, 0);
  const int32_t per_replica = dst.layout.world_size / es.dp;
  dst.layout.host_of_rank.clear();
  for (int32_t r = 0; r < dst.layout.world_size; ++r) {
    dst.layout.host_of_rank.push_back(1 + r / per_replica);
  }
  return BuildPlan(std::move(src.layout), std::move(dst.layout), po);
}

}  // namespace

absl::StatusOr<Plan> PlanWithRelays(const std::string& model, const std::string& trainer_spec,
                                    const std::string& engine_spec, int32_t lanes,
                                    int64_t budget, bool delta) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(trainer_spec));
  PlannerOptions po;
  po.relay = true;
  po.delta = delta;
  po.num_lanes = lanes;
  po.choose_lanes = false;
  po.staging_budget_bytes = budget;
  po.max_wave_bytes = po.max_message_bytes = budget / lanes / 4;
  REFIT_ASSIGN_OR_RETURN(Plan plan, absl::StrContains(engine_spec, ';')
                                        ? PlanEnginesOnOneHost(config, ts, engine_spec, po)
                                        : PlanReplicasOnHostsOfTheirOwn(config, ts, engine_spec, po));
  if (Forwarded(plan) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(model, " ", trainer_spec, " -> ", engine_spec, ": no relay in the plan"));
  }
  return plan;
}

std::vector<RelayCase> DenseRelayCases() {
  std::vector<RelayCase> cases;
  for (const char* spec :
       {"vllm:tp=2,dp=2", "vllm:tp=1,dp=3,quant=fp8", "vllm:tp=2,dp=2,quant=fp8"}) {
    RelayCase c;
    c.model = "tiny-qwen3-moe-b128";
    c.engine_spec = spec;
    c.budget = 4 << 20;
    cases.push_back(c);
  }
  // Two engines on one host under 4 trainer replicas: a TP1 rank's whole
  // tensor is two TP2 ranks' halves, and every holder of a half takes part
  // of it into the host (relays.h: finer regions).
  for (const char* spec : {"vllm:tp=2;vllm:tp=1,dp=2", "vllm:tp=2,quant=fp8;vllm:tp=1,dp=2,quant=fp8"}) {
    RelayCase c;
    c.model = "tiny-qwen3-moe-b128";
    c.trainer_spec = "megatron:tp=1,dp=4";
    c.engine_spec = spec;
    c.budget = 4 << 20;
    cases.push_back(c);
  }
  return cases;
}

std::vector<RelayCase> DeltaRelayCases() {
  // (spec, lanes): delta ranks of 2 lanes take 9 streams, of 1 lane 6.
  const std::pair<const char*, int32_t> specs[] = {{"vllm:tp=1,dp=2", 2},
                                                   {"vllm:tp=1,dp=3,quant=fp8", 1},
                                                   {"vllm:tp=1,dp=2,quant=fp8", 2},
                                                   {"vllm:tp=2,dp=2", 1}};
  std::vector<RelayCase> cases;
  for (const auto& [spec, lanes] : specs) {
    RelayCase c;
    c.model = "tiny-qwen3-moe-b128";
    c.engine_spec = spec;
    c.lanes = lanes;
    c.budget = 4 << 20;
    c.stops.clear();
    cases.push_back(c);
  }
  cases.back().stops = {RankStop::kStalled, RankStop::kCancelled};
  return cases;
}

std::string CheckDenseRelayRounds(const MemberKit& kit, const RelayCase& c) {
  SCOPED_TRACE(absl::StrCat(c.engine_spec, " dense, ", c.lanes, " lanes"));
  std::unique_ptr<MemberRounds> rounds = Rounds(kit, c, /*delta=*/false);
  if (rounds == nullptr) return "";
  const Plan& plan = rounds->plan();
  const int32_t ws = plan.src.world_size;
  const int64_t budget = plan.options.staging_budget_bytes;
  int64_t peak = 0;
  double seconds = 0;
  for (double change : {0.0, 0.01}) {
    rounds->Change(change);
    const MemberRound r = rounds->Run(absl::Seconds(20));
    EXPECT_EQ(Committed(*rounds, r, "dense round"), "") << "change " << change;
    if (!r.commit.ok()) return "";
    int64_t relayed = 0;
    for (int32_t g = ws; g < static_cast<int32_t>(r.run.size()); ++g) {
      relayed += r.run[g].bytes_sent;
      peak = std::max(peak, r.run[g].peak_staging_bytes);
      EXPECT_LE(r.run[g].peak_staging_bytes, budget) << "engine rank " << g - ws;
    }
    EXPECT_EQ(relayed, Forwarded(plan));
    seconds = absl::ToDoubleSeconds(r.took);
  }
  return absl::StrCat(c.engine_spec, " dense: ", plan.messages.size(), " messages in ",
                      plan.waves.size(), " waves, relays forwarded ", Forwarded(plan), " of ",
                      plan.stats.total_bytes, " bytes (depth ", plan.stats.relay_depth,
                      "), engine staging peak ", peak, " <= ", budget, ", round ", seconds, " s");
}

std::string CheckDeltaRelayRounds(const MemberKit& kit, const RelayCase& c) {
  SCOPED_TRACE(absl::StrCat(c.engine_spec, " delta, ", c.lanes, " lanes"));
  std::unique_ptr<MemberRounds> rounds = Rounds(kit, c, /*delta=*/true);
  if (rounds == nullptr) return "";
  const Plan& plan = rounds->plan();
  const int32_t ws = plan.src.world_size;
  const int64_t budget = plan.options.staging_budget_bytes;
  int64_t peak = 0, forwarded = 0, wire = 0, dense = 0;
  for (double change : {0.0, 0.01}) {
    rounds->Change(change);
    const MemberRound r = rounds->Run(absl::Seconds(20));
    const std::string what = change == 0 ? "dense round" : "delta round";
    EXPECT_EQ(Committed(*rounds, r, what.c_str()), "");
    if (!r.commit.ok()) return "";
    forwarded = wire = dense = 0;
    for (size_t g = 0; g < r.delta.size(); ++g) {
      EXPECT_LE(r.delta[g].peak_used_bytes, budget) << what << ", global rank " << g;
      peak = std::max(peak, r.delta[g].peak_used_bytes);
      forwarded += r.delta[g].forwarded_bytes;
      if (static_cast<int32_t>(g) < ws) {
        wire += r.delta[g].wire_bytes;
        dense += r.delta[g].dense_bytes;
      }
    }
    EXPECT_GT(forwarded, 0) << what << ": no relay forwarded";
  }
  EXPECT_LT(wire, dense / 5) << "the delta round sent most of the dense bytes";
  // A byte flipped in the relay's buffer, at a record it forwards from.
  const Message& relay = FirstRelay(plan);
  const Record& rec = plan.dst.records[plan.segments[relay.first_segment].src_record];
  const std::string tensor = plan.dst.tensors[rec.tensor].name;
  rounds->FlipEngineByte(rec.buffer, rec.byte_offset, 0x40);
  const MemberRound flipped = rounds->Run(absl::Seconds(20));
  EXPECT_TRUE(absl::IsDataLoss(flipped.commit)) << flipped.commit;
  EXPECT_TRUE(absl::StrContains(flipped.commit.message(),
                                absl::StrCat("engine rank ", relay.src_rank, " tensor ", tensor)))
      << flipped.commit;
  rounds->Change(0.01);
  EXPECT_EQ(Committed(*rounds, rounds->Run(absl::Seconds(20)), "the round after the flip"), "");
  for (RankStop how : c.stops) EXPECT_EQ(StoppedRelay(*rounds, how), "");
  return absl::StrCat(c.engine_spec, " delta: ", plan.messages.size(), " messages in ",
                      plan.waves.size(), " waves, wire ", wire, " of ", dense,
                      " dense bytes, relays forwarded ", forwarded, " bytes, staging peak ", peak,
                      " <= ", budget, "; flipped relay byte: ", flipped.commit.message());
}

}  // namespace testing
}  // namespace refit
