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
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "mapping/validate.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"

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

// Checks the members of one side/engine agree on the convention, have the
// world size it implies and ranks 0..world-1 in order, and registered what
// the layout expects.
absl::Status CheckMembers(absl::Span<const v1::Registration* const> members,
                          int32_t world, const MappedSide& side) {
  if (static_cast<int32_t>(members.size()) != world) {
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
    REFIT_RETURN_IF_ERROR(
        AnnotateStatus(ValidateRankBuffers(side, r, reg), MemberName(m)));
  }
  return absl::OkStatus();
}

// Appends engine layout `e` to the combined destination layout, its ranks
// shifted by dst->world_size.
absl::Status AppendEngine(const SideLayout& e, const std::string& engine_id,
                          SideLayout* dst) {
  if (dst->tensors.empty()) {
    dst->tensors = e.tensors;
  } else if (!(dst->tensors == e.tensors)) {
    // Name the first difference: engines of one job hold the same tensors
    // in the same dtypes (one quant= setting for all).
    std::string what = "a different number of tensors";
    for (size_t i = 0; i < std::min(dst->tensors.size(), e.tensors.size()); ++i) {
      const TensorSpec& a = dst->tensors[i];
      const TensorSpec& b = e.tensors[i];
      if (a == b) continue;
      what = absl::StrCat(TensorSpecString(b),
                          b.transform != Transform::kNone
                              ? absl::StrCat(" (", TransformName(b.transform), ")")
                              : std::string(),
                          " where the first engine has ", TensorSpecString(a),
                          a.transform != Transform::kNone
                              ? absl::StrCat(" (", TransformName(a.transform), ")")
                              : std::string());
      break;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "engine '", engine_id, "': its logical tensors differ from the first "
        "engine's (every engine of a job needs the same model and quant=): ", what));
  }
  const int32_t rank0 = dst->world_size;
  const int32_t buf0 = static_cast<int32_t>(dst->buffers.size());
  for (BufferSpec b : e.buffers) {
    b.rank += rank0;
    dst->buffers.push_back(std::move(b));
  }
  for (Record r : e.records) {
    r.rank += rank0;
    r.buffer += buf0;
    dst->records.push_back(std::move(r));
  }
  for (int32_t s : e.stage_of_rank) dst->stage_of_rank.push_back(s);
  dst->world_size += e.world_size;
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

  // Host ids -> small integers, in order of first appearance.
  std::map<std::string, int32_t> host_index;
  auto host_of = [&](const v1::Registration& m) {
    return host_index.emplace(m.identity().host_id(),
                              static_cast<int32_t>(host_index.size()))
        .first->second;
  };

  // Trainer side.
  REFIT_ASSIGN_OR_RETURN(
      TrainerSpec ts, AnnotateStatus(ParseTrainerSpec(trainer[0].convention()),
                                     "trainer rank 0 convention"));
  REFIT_ASSIGN_OR_RETURN(
      MappedSide src,
      AnnotateStatus(BuildTrainerLayout(model, ts), "trainer layout"));
  std::vector<const v1::Registration*> tm;
  for (const auto& m : trainer) tm.push_back(&m);
  REFIT_RETURN_IF_ERROR(CheckMembers(tm, ts.world_size(), src));
  src.layout.host_of_rank.clear();
  for (const auto& m : trainer) src.layout.host_of_rank.push_back(host_of(m));

  // Engines, in (engine id, rank) order as given.
  SideLayout dst;
  std::vector<int32_t> dst_rank_of_member;  // parallel to `engine`
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
    REFIT_ASSIGN_OR_RETURN(
        MappedSide e, AnnotateStatus(BuildEngineLayout(model, es),
                                     absl::StrCat("engine '", id, "' layout")));
    std::vector<const v1::Registration*> em;
    for (size_t k = i; k < j; ++k) em.push_back(&engine[k]);
    REFIT_RETURN_IF_ERROR(CheckMembers(em, es.world_size(), e));
    const int32_t rank0 = dst.world_size;
    REFIT_RETURN_IF_ERROR(AppendEngine(e.layout, id, &dst));
    for (size_t k = i; k < j; ++k) {
      dst_rank_of_member.push_back(rank0 + engine[k].identity().rank());
      dst.host_of_rank.push_back(host_of(engine[k]));
    }
    i = j;
  }
  if (!dst.stage_of_rank.empty() &&
      static_cast<int32_t>(dst.stage_of_rank.size()) != dst.world_size) {
    dst.stage_of_rank.clear();
  }

  REFIT_ASSIGN_OR_RETURN(Plan plan,
                         BuildPlan(std::move(src.layout), std::move(dst), options.planner));
  BuiltPlan out;
  out.num_lanes = options.planner.num_lanes;
  out.fingerprint = plan.fingerprint;
  std::vector<int32_t> trainer_ranks(trainer.size());
  for (size_t t = 0; t < trainer.size(); ++t) trainer_ranks[t] = static_cast<int32_t>(t);
  out.trainer_slices =
      SerializedSlices(plan, Side::kTrainer, trainer_ranks, options.slice_threads);
  out.engine_slices =
      SerializedSlices(plan, Side::kEngine, dst_rank_of_member, options.slice_threads);
  std::vector<int32_t> member_of_dst_rank(plan.dst.world_size, -1);
  for (size_t k = 0; k < dst_rank_of_member.size(); ++k) {
    member_of_dst_rank[dst_rank_of_member[k]] = static_cast<int32_t>(k);
  }
  const int32_t num_trainer = static_cast<int32_t>(trainer.size());
  for (const Message& m : plan.messages) {
    out.pairs.emplace_back(m.src_rank, num_trainer + member_of_dst_rank[m.dst_rank]);
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
