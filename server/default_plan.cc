// DefaultPlanFunction (see default_plan.h).
#include "server/default_plan.h"

#include <algorithm>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"
#include "job/job_plan.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "mapping/plan_size.h"
#include "mapping/validate.h"
#include "plan/cost.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "server/slice_bounds.h"

namespace refit {
namespace {

std::string MemberName(const v1::Registration& r) {
  const v1::MemberIdentity& id = r.identity();
  if (id.side() == v1::SIDE_TRAINER) return absl::StrCat("trainer rank ", id.rank());
  return absl::StrCat("engine '", id.engine_id(), "' rank ", id.rank());
}

absl::StatusOr<ModelConfig> ModelOf(const std::string& text) {
  // A config.json text starts with '{'; anything else is a built-in name
  // (never a path: refitd does not read files named by its peers).
  if (!text.empty() && text[0] == '{') return ParseModelConfig(text);
  REFIT_ASSIGN_OR_RETURN(std::string json, BuiltinModelJson(text));
  return ParseModelConfig(json);
}

// Checks the members of one side/engine agree on the convention and have the
// world size it implies and ranks 0..world-1 in order: before any layout is
// built, so a convention whose world is not the members registered costs
// nothing.
absl::Status CheckWorld(absl::Span<const v1::Registration* const> members,
                        int32_t world) {
  if (static_cast<int64_t>(members.size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        MemberName(*members[0]), ": convention '", members[0]->convention(),
        "' has ", world, " ranks but ", members.size(), " registered"));
  }
  for (int32_t r = 0; r < world; ++r) {
    const v1::Registration& m = *members[r];
    if (m.convention() != members[0]->convention()) {
      return absl::InvalidArgumentError(absl::StrCat(
          MemberName(m), ": convention '", m.convention(), "' differs from '",
          members[0]->convention(), "' of ", MemberName(*members[0])));
    }
    if (m.identity().rank() != r || m.identity().world_size() != world) {
      return absl::InvalidArgumentError(absl::StrCat(
          MemberName(m), ": identity.rank/world_size ", m.identity().rank(),
          "/", m.identity().world_size(), " do not match convention '",
          m.convention(), "' (world ", world, ")"));
    }
  }
  return absl::OkStatus();
}

// Checks each member registered what the layout expects of its rank.
absl::Status CheckBuffers(absl::Span<const v1::Registration* const> members,
                          const MappedSide& side) {
  for (size_t r = 0; r < members.size(); ++r) {
    const v1::Registration& m = *members[r];
    std::vector<LocalBuffer> reg;
    reg.reserve(m.buffers_size());
    for (const v1::LocalBuffer& b : m.buffers()) {
      LocalBuffer lb;
      lb.name = b.name();
      lb.shape.assign(b.shape().begin(), b.shape().end());
      lb.dtype = static_cast<DType>(b.dtype());
      lb.byte_size = b.byte_size();
      reg.push_back(std::move(lb));
    }
    REFIT_RETURN_IF_ERROR(AnnotateStatus(
        ValidateRankBuffers(side, static_cast<int32_t>(r), reg), MemberName(m)));
  }
  return absl::OkStatus();
}

// CANCELLED when options.cancel was set (refitd stopping), between phases.
absl::Status Cancelled(const DefaultPlanOptions& options) {
  if (options.cancel != nullptr && options.cancel->load()) {
    return absl::CancelledError("plan build cancelled: refitd is stopping");
  }
  return absl::OkStatus();
}

absl::StatusOr<BuiltPlan> BuildDefaultPlan(
    const DefaultPlanOptions& options,
    const std::vector<v1::Registration>& trainer,
    const std::vector<v1::Registration>& engine) {
  if (trainer.empty() || engine.empty()) {
    return absl::InvalidArgumentError(
        "a plan needs at least one trainer rank and one engine rank");
  }
  const std::string& model_text = trainer[0].model_config();
  for (const auto* side : {&trainer, &engine}) {
    for (const v1::Registration& m : *side) {
      if (m.model_config() != model_text) {
        return absl::InvalidArgumentError(absl::StrCat(
            MemberName(m), ": model_config differs from trainer rank 0's"));
      }
    }
  }
  REFIT_ASSIGN_OR_RETURN(
      ModelConfig model,
      AnnotateStatus(ModelOf(model_text), "model_config of trainer rank 0"));

  // Every member's host as it reported it, unknown unless all reported
  // one; and its GPU (identity.device_uuid; "" where unknown, as on CPU
  // members), none unless some member reported one.
  JobPlacement placement;
  bool all_hosts = true, any_gpu = false;
  for (const auto& m : trainer) {
    placement.trainer_hosts.push_back(m.identity().host_id());
    placement.trainer_gpus.push_back(m.identity().device_uuid());
    all_hosts = all_hosts && !m.identity().host_id().empty();
    any_gpu = any_gpu || !m.identity().device_uuid().empty();
  }
  for (const auto& m : engine) {
    all_hosts = all_hosts && !m.identity().host_id().empty();
    any_gpu = any_gpu || !m.identity().device_uuid().empty();
  }

  // Conventions first, each checked against the members registered, and the
  // plan's size estimated: nothing is sized by a convention before that.
  REFIT_ASSIGN_OR_RETURN(
      TrainerSpec ts, AnnotateStatus(ParseTrainerSpec(trainer[0].convention()),
                                     "trainer rank 0 convention"));
  std::vector<const v1::Registration*> tm;
  for (const auto& m : trainer) tm.push_back(&m);
  REFIT_RETURN_IF_ERROR(CheckWorld(tm, ts.world_size()));
  // Engines, in (engine id, rank) order as given.
  std::vector<JobEngine> engines;
  std::vector<std::vector<const v1::Registration*>> members_of_engine;
  for (size_t i = 0; i < engine.size();) {
    size_t j = i;
    while (j < engine.size() &&
           engine[j].identity().engine_id() == engine[i].identity().engine_id()) {
      ++j;
    }
    const std::string& id = engine[i].identity().engine_id();
    REFIT_ASSIGN_OR_RETURN(
        EngineSpec es,
        AnnotateStatus(ParseEngineSpec(engine[i].convention()),
                       absl::StrCat("engine '", id, "' convention")));
    std::vector<const v1::Registration*> em;
    for (size_t k = i; k < j; ++k) em.push_back(&engine[k]);
    REFIT_RETURN_IF_ERROR(CheckWorld(em, es.world_size()));
    engines.push_back(JobEngine{id, es});
    members_of_engine.push_back(std::move(em));
    i = j;
  }
  std::vector<EngineSpec> engine_specs;
  for (const JobEngine& e : engines) engine_specs.push_back(e.spec);
  int64_t registered = 0;
  for (const auto* side : {&trainer, &engine}) {
    for (const v1::Registration& m : *side) registered += m.buffers_size();
  }
  REFIT_RETURN_IF_ERROR(CheckRegisteredBuffers(model, ts, engine_specs, registered));
  REFIT_RETURN_IF_ERROR(Cancelled(options));
  REFIT_ASSIGN_OR_RETURN(int64_t tensors, CountRankTensors(model, ts, engine_specs));
  REFIT_RETURN_IF_ERROR(CheckRecordsAgainstRegistered(tensors, registered));
  REFIT_ASSIGN_OR_RETURN(int64_t records, EstimatePlanRecords(model, ts, engine_specs));
  REFIT_RETURN_IF_ERROR(
      CheckPlanBudget(records, options.max_plan_bytes, options.budget_name));

  REFIT_RETURN_IF_ERROR(Cancelled(options));
  REFIT_ASSIGN_OR_RETURN(JobLayouts layouts, MapJob(model, ts, engines));
  REFIT_RETURN_IF_ERROR(Cancelled(options));
  REFIT_RETURN_IF_ERROR(CheckBuffers(tm, layouts.trainer));
  std::vector<int32_t> dst_rank_of_member;  // parallel to `engine`
  int32_t rank0 = 0;
  for (size_t e = 0; e < engines.size(); ++e) {
    REFIT_RETURN_IF_ERROR(CheckBuffers(members_of_engine[e], layouts.engines[e]));
    for (const v1::Registration* m : members_of_engine[e]) {
      dst_rank_of_member.push_back(rank0 + m->identity().rank());
      placement.engine_hosts.push_back(m->identity().host_id());
      placement.engine_gpus.push_back(m->identity().device_uuid());
    }
    rank0 += engines[e].spec.world_size();
  }
  if (!any_gpu) {
    placement.trainer_gpus.clear();
    placement.engine_gpus.clear();
  }
  if (!all_hosts) placement = JobPlacement();

  REFIT_RETURN_IF_ERROR(Cancelled(options));
  PlannerOptions planner = options.planner;
  planner.cancel = options.cancel.get();
  // The colocated pull path runs no relays: a membership using it plans
  // without them.
  for (const auto* side : {&trainer, &engine}) {
    for (const v1::Registration& r : *side) {
      if (r.identity().transport() == v1::TRANSPORT_PULL) planner.relay = false;
    }
  }
  REFIT_ASSIGN_OR_RETURN(Plan plan, PlanJob(std::move(layouts), engines, placement, planner));
  REFIT_RETURN_IF_ERROR(Cancelled(options));
  BuiltPlan out;
  out.num_lanes = plan.options.num_lanes;  // the planner may take more (planner.h)
  out.fingerprint = plan.fingerprint;
  out.bytes = plan.stats.total_bytes;
  // Members without GPUs move host memory over Gloo: their round is
  // predicted at the host links, not the GPU links the plan was placed
  // with, and a delta round runs only where the host codec can win.
  out.predicted_seconds = plan.stats.predicted_seconds;
  if (!any_gpu) {
    const HostDeltaChoice delta = ChooseHostDelta(plan, options.host_delta);
    out.predicted_seconds = delta.dense_seconds;
    out.host_delta_dense = !delta.delta;
    out.host_delta_note = delta.reason;
  }
  std::vector<int32_t> trainer_ranks(trainer.size());
  for (size_t t = 0; t < trainer.size(); ++t) trainer_ranks[t] = static_cast<int32_t>(t);
  out.trainer_slices =
      SerializedSlices(plan, Side::kTrainer, trainer_ranks, options.slice_threads);
  out.engine_slices =
      SerializedSlices(plan, Side::kEngine, dst_rank_of_member, options.slice_threads);
  out.trainer_bounds = SliceBoundsOf(plan, Side::kTrainer, trainer_ranks);
  out.engine_bounds = SliceBoundsOf(plan, Side::kEngine, dst_rank_of_member);
  std::vector<int32_t> member_of_dst_rank(plan.dst.world_size, -1);
  for (size_t k = 0; k < dst_rank_of_member.size(); ++k) {
    member_of_dst_rank[dst_rank_of_member[k]] = static_cast<int32_t>(k);
  }
  const int32_t num_trainer = static_cast<int32_t>(trainer.size());
  for (const Message& m : plan.messages) {
    // A relay's sender is an engine member.
    out.pairs.emplace_back(m.relay ? num_trainer + member_of_dst_rank[m.src_rank] : m.src_rank,
                           num_trainer + member_of_dst_rank[m.dst_rank]);
  }
  std::sort(out.pairs.begin(), out.pairs.end());
  out.pairs.erase(std::unique(out.pairs.begin(), out.pairs.end()), out.pairs.end());
  return out;
}

}  // namespace

PlanFunction DefaultPlanFunction(DefaultPlanOptions options) {
  return [options](const std::vector<v1::Registration>& trainer,
                   const std::vector<v1::Registration>& engine) {
    return BuildDefaultPlan(options, trainer, engine);
  };
}

}  // namespace refit
