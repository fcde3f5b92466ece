// BuildPlan: the planner's phases in order, each timed. The phases live in
// plan/internal/; see planner.h for the contract and the balancing rule.
#include "plan/planner.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "plan/conversion.h"
#include "plan/fingerprint.h"
#include "plan/internal/balance.h"
#include "plan/internal/budgets.h"
#include "plan/internal/candidates.h"
#include "plan/internal/coverage.h"
#include "plan/internal/errors.h"
#include "plan/internal/messages.h"
#include "plan/internal/normalize.h"
#include "plan/internal/relay_messages.h"
#include "plan/internal/relays.h"
#include "plan/internal/waves.h"
#include "plan/internal/segments.h"
#include "plan/internal/validate.h"
#include "plan/one_pass.h"
#include "plan/plan_stats.h"
#include "plan/wave_bytes.h"

namespace refit {
namespace {

using internal_plan::AddRelayMessages;
using internal_plan::BalanceReplicas;
using internal_plan::ChooseRelaySources;
using internal_plan::Candidates;
using internal_plan::CheckCoverage;
using internal_plan::CoalesceMessages;
using internal_plan::HeaviestRankBytes;
using internal_plan::EmitMessages;
using internal_plan::FindCandidates;
using internal_plan::JoinErrors;
using internal_plan::MatchTensors;
using internal_plan::MergeIndexedRecords;
using internal_plan::MessageCap;
using internal_plan::ChooseLanes;
using internal_plan::OrderSegments;
using internal_plan::PendingMessage;
using internal_plan::ScheduleWaves;
using internal_plan::SetDeltaCaps;
using internal_plan::SetQuantizeCaps;
using internal_plan::SetRelayCaps;
using internal_plan::SegmentKeys;
using internal_plan::Sources;
using internal_plan::TrainerSenders;
using internal_plan::ValidateLayouts;
using internal_plan::ValidateOptions;

// Wall time per phase: End(name) records the time since the previous End
// (or construction) under that name.
class PhaseClock {
 public:
  void End(const char* name) {
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name,
                         std::chrono::duration<double>(now - start_).count());
    start_ = now;
  }
  std::vector<std::pair<std::string, double>> Take() {
    return std::move(phases_);
  }

 private:
  std::vector<std::pair<std::string, double>> phases_;
  std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();
};

// Relays where a plan's regions nest (one engine layout needs halves of
// what another needs quarters of): the half's holders alone carry it into
// their host, while every holder of a quarter could carry that quarter.
// Where the relay plan of *candidates (*sources, *stats) is over
// kChainSlack times the relay-aware bound, plans again with every source
// piece cut at the boundaries of the dst records (FindCandidates'
// cut_at_dst; where none is cut, the same candidates) and each rank's
// bytes counted from the start (ChooseRelaySources' anticipate), and
// keeps that plan where it is faster. The bound then given is the lesser
// of the two (the finer candidates' plans include the others). Returns
// FindCandidates' error.
absl::Status RelayOverFinerRegions(const Plan& plan, const PlannerOptions& options,
                                   Candidates* candidates, Sources* sources, PlanStats* stats,
                                   std::vector<std::string>* errors) {
  if (!(stats->predicted_seconds > internal_plan::kChainSlack * stats->lower_bound_seconds)) {
    return absl::OkStatus();
  }
  Candidates fine;
  REFIT_RETURN_IF_ERROR(FindCandidates(plan.src, plan.dst, plan.dst_to_src_tensor, &fine,
                                       errors, /*cut_at_dst=*/true));
  PlanStats fine_stats;
  Sources fine_sources = ChooseRelaySources(fine, plan.src, plan.dst, options, &fine_stats,
                                            /*anticipate=*/true);
  const double bound = std::min(stats->lower_bound_seconds, fine_stats.lower_bound_seconds);
  if (fine_stats.predicted_seconds < stats->predicted_seconds) {
    *candidates = std::move(fine);
    *sources = std::move(fine_sources);
    *stats = std::move(fine_stats);
  }
  stats->lower_bound_seconds = bound;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> BuildPlan(SideLayout src, SideLayout dst,
                               const PlannerOptions& options) {
  REFIT_RETURN_IF_ERROR(ValidateOptions(options));
  Plan plan;
  plan.options = options;
  plan.options.cancel = nullptr;  // the plan outlives the build
  std::vector<std::string> errors;
  PhaseClock clock;
  // Ends a phase; CANCELLED when options.cancel was set meanwhile.
  auto phase_done = [&](const char* name) {
    clock.End(name);
    return options.cancel != nullptr && options.cancel->load()
               ? absl::CancelledError(absl::StrCat("plan build cancelled after phase ", name))
               : absl::OkStatus();
  };

  ValidateLayouts(src, dst, &errors);
  if (!errors.empty()) return JoinErrors(errors);
  REFIT_RETURN_IF_ERROR(phase_done("validate"));

  // The engine's dtypes (FP8 blocks, f32 -exp): the source as the senders
  // convert it, with scratch buffers (plan/conversion.h).
  {
    REFIT_ASSIGN_OR_RETURN(ConvertedSource converted,
                           ConvertSource(std::move(src), dst, options.fp8_block));
    src = std::move(converted.layout);
    plan.conversions = std::move(converted.conversions);
    plan.cut_tiles = std::move(converted.cut_tiles);
  }
  REFIT_RETURN_IF_ERROR(phase_done("convert"));

  MatchTensors(src, dst, &plan.dst_to_src_tensor, &errors);
  if (!errors.empty()) return JoinErrors(errors);
  REFIT_RETURN_IF_ERROR(phase_done("match"));

  // plan.src/plan.dst are the layouts as given (moved, not copied) with
  // indexed records merged; src and dst are not used below.
  MergeIndexedRecords(&src.records);
  MergeIndexedRecords(&dst.records);
  plan.src = std::move(src);
  plan.dst = std::move(dst);
  REFIT_RETURN_IF_ERROR(phase_done("normalize"));

  Candidates candidates;
  REFIT_RETURN_IF_ERROR(FindCandidates(plan.src, plan.dst,
                                       plan.dst_to_src_tensor, &candidates,
                                       &errors));
  REFIT_RETURN_IF_ERROR(phase_done("candidates"));

  CheckCoverage(plan.dst, &errors);
  if (!errors.empty()) return JoinErrors(errors);
  REFIT_RETURN_IF_ERROR(phase_done("coverage"));

  PlanStats cost_stats;
  Sources sources;
  if (options.relay) {
    sources = ChooseRelaySources(candidates, plan.src, plan.dst, options, &cost_stats);
    REFIT_RETURN_IF_ERROR(RelayOverFinerRegions(plan, options, &candidates, &sources,
                                                &cost_stats, &errors));
  } else {
    sources.choice = BalanceReplicas(candidates, plan.src, plan.dst, options, &cost_stats);
  }
  REFIT_RETURN_IF_ERROR(internal_plan::CheckEverySourced(candidates, sources, plan.dst));
  REFIT_RETURN_IF_ERROR(phase_done("balance"));

  std::vector<PendingMessage> messages;
  // With relays: each plan segment's candidate.
  std::vector<int32_t> segment_cand;
  // Relays pipelined in waves sized by their chains' depth (below).
  bool relay_caps = false;
  {
    const std::vector<int32_t> senders = TrainerSenders(candidates, sources.choice);
    // Relay chains pipeline in waves sized by their depth (budgets.h).
    // Only where relays carry the bulk of an engine rank's bytes: else the
    // trainer's own waves set the pace and the relays' tail is short.
    int64_t max_rank_bytes = 0;
    if (sources.max_depth > 0) {
      std::vector<int64_t> received(plan.dst.world_size, 0), relayed(plan.dst.world_size, 0);
      int64_t max_relayed = 0;
      for (size_t i = 0; i < candidates.cands.size(); ++i) {
        const internal_plan::Candidate& c = candidates.cands[i];
        max_rank_bytes = std::max(max_rank_bytes, received[c.dst_rank] += c.bytes);
        if (sources.feeder[i] >= 0) {
          max_relayed = std::max(max_relayed, relayed[c.dst_rank] += c.bytes);
        }
      }
      relay_caps = 2 * max_relayed >= max_rank_bytes;
    }
    // The wave and message caps of relays, delta rounds and quantizing, at
    // the plan's lane count (each keeps a smaller value already set).
    const bool converts = !plan.conversions.empty();
    const auto set_caps = [&] {
      if (relay_caps) SetRelayCaps(max_rank_bytes, sources.max_depth, &plan.options);
      SetDeltaCaps(&plan.options);
      SetQuantizeCaps(converts, &plan.options);
    };
    set_caps();
    SegmentKeys keys;
    REFIT_RETURN_IF_ERROR(OrderSegments(candidates, senders, plan.src, plan.dst,
                                        MessageCap(plan.options), &keys));
    // More lanes for a plan of mostly staged bytes; its segments are then
    // cut at the smaller per-lane budget.
    const internal_plan::RankBytes heaviest =
        HeaviestRankBytes(keys, candidates, plan, options.direct_min_bytes);
    const int32_t lanes = ChooseLanes(options, heaviest.coalesced, heaviest.all);
    if (lanes != plan.options.num_lanes) {
      plan.options.num_lanes = lanes;
      if (relay_caps || options.delta || converts) {
        plan.options.max_wave_bytes = options.max_wave_bytes;
        plan.options.max_message_bytes = options.max_message_bytes;
      }
      set_caps();
      keys = SegmentKeys();
      REFIT_RETURN_IF_ERROR(OrderSegments(candidates, senders, plan.src, plan.dst,
                                          MessageCap(plan.options), &keys));
    }
    REFIT_RETURN_IF_ERROR(phase_done("segments"));
    if (sources.max_depth > 0) {
      // Room for the relays' segments too (one each, unless split): the
      // segments are not moved when the relays are added.
      size_t relayed = 0;
      for (int32_t f : sources.feeder) relayed += f >= 0;
      const size_t n = keys.keys.size() + relayed + relayed / 8;
      plan.segments.reserve(n);
      segment_cand.reserve(n);
    }
    messages = CoalesceMessages(keys, candidates, sources, MessageCap(plan.options),
                                options.direct_min_bytes, &plan,
                                sources.max_depth > 0 ? &segment_cand : nullptr);
  }  // the keys are not needed below
  REFIT_RETURN_IF_ERROR(phase_done("messages"));

  ScheduleWaves(plan.options, plan.src.world_size, plan.dst.world_size, &messages,
                &plan.waves);
  REFIT_RETURN_IF_ERROR(phase_done("waves"));
  if (sources.max_depth > 0) {
    REFIT_RETURN_IF_ERROR(AddRelayMessages(candidates, sources, MessageCap(plan.options),
                                           options.direct_min_bytes, relay_caps, &segment_cand,
                                           &messages, &plan));
    REFIT_RETURN_IF_ERROR(phase_done("relays"));
  }
  EmitMessages(messages, &plan);
  SetWaveBytes(&plan);
  REFIT_RETURN_IF_ERROR(phase_done("emit"));

  // Which conversions the pull path runs in one pass (one_pass.h).
  DecideOnePass(&plan);
  REFIT_RETURN_IF_ERROR(phase_done("one_pass"));

  plan.stats = ComputePlanStats(plan);
  plan.stats.predicted_seconds = cost_stats.predicted_seconds;
  plan.stats.lower_bound_seconds = cost_stats.lower_bound_seconds;
  plan.stats.sender_lower_bound_seconds = cost_stats.sender_lower_bound_seconds;
  plan.stats.relay_depth = cost_stats.relay_depth;
  plan.stats.same_gpu_bytes = cost_stats.same_gpu_bytes;
  plan.stats.intra_host_bytes = cost_stats.intra_host_bytes;
  plan.stats.inter_host_bytes = cost_stats.inter_host_bytes;
  REFIT_RETURN_IF_ERROR(phase_done("stats"));
  plan.fingerprint = PlanFingerprint(plan);
  REFIT_RETURN_IF_ERROR(phase_done("fingerprint"));
  plan.stats.phase_seconds = clock.Take();
  return plan;
}

}  // namespace refit
