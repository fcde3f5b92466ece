// MapJob, PlanJob, BuildJobPlan (see job_plan.h).
#include "job/job_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/mapping.h"
#include "plan/planner.h"

namespace refit {
namespace {

// "w f8e4m3[4, 8] (fp8_block codes)", "A_log f32[8] (neg_exp)".
std::string DescribeTensor(const TensorSpec& t) {
  std::string out = TensorSpecString(t);
  if (t.format) absl::StrAppend(&out, " (", TensorFormatString(t), ")");
  if (t.transform != Transform::kNone) {
    absl::StrAppend(&out, " (", TransformName(t.transform), ")");
  }
  return out;
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
      if (dst->tensors[i] == e.tensors[i]) continue;
      what = absl::StrCat(DescribeTensor(e.tensors[i]), " where the first engine has ",
                          DescribeTensor(dst->tensors[i]));
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

// (host, GPU) names -> GPU indices in order of first appearance, trainer
// first; "" -> -1 (unknown).
absl::Status ApplyGpus(const JobPlacement& placement, SideLayout* src,
                       SideLayout* dst) {
  src->gpu_of_rank.clear();
  dst->gpu_of_rank.clear();
  if (placement.trainer_gpus.empty() && placement.engine_gpus.empty()) {
    return absl::OkStatus();
  }
  if (placement.trainer_hosts.empty()) {
    return absl::InvalidArgumentError("placement: GPUs given without hosts");
  }
  if (static_cast<int32_t>(placement.trainer_gpus.size()) != src->world_size ||
      static_cast<int32_t>(placement.engine_gpus.size()) != dst->world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: ", placement.trainer_gpus.size(), " trainer and ",
        placement.engine_gpus.size(), " engine GPUs given for ", src->world_size,
        " trainer and ", dst->world_size, " engine ranks"));
  }
  std::map<std::pair<std::string, std::string>, int32_t> index;
  auto gpus = [&](const std::vector<std::string>& hosts,
                  const std::vector<std::string>& names, std::vector<int32_t>* out) {
    for (size_t r = 0; r < names.size(); ++r) {
      if (names[r].empty()) {
        out->push_back(-1);
        continue;
      }
      out->push_back(index.emplace(std::make_pair(hosts[r], names[r]),
                                   static_cast<int32_t>(index.size()))
                         .first->second);
    }
  };
  gpus(placement.trainer_hosts, placement.trainer_gpus, &src->gpu_of_rank);
  gpus(placement.engine_hosts, placement.engine_gpus, &dst->gpu_of_rank);
  return absl::OkStatus();
}

// Host names -> indices in order of first appearance, trainer first; then
// the GPUs (ApplyGpus).
absl::Status ApplyPlacement(const JobPlacement& placement, SideLayout* src,
                            SideLayout* dst) {
  src->host_of_rank.clear();
  dst->host_of_rank.clear();
  if (placement.trainer_hosts.empty() && placement.engine_hosts.empty()) {
    return ApplyGpus(placement, src, dst);
  }
  if (static_cast<int32_t>(placement.trainer_hosts.size()) != src->world_size ||
      static_cast<int32_t>(placement.engine_hosts.size()) != dst->world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: ", placement.trainer_hosts.size(), " trainer and ",
        placement.engine_hosts.size(), " engine hosts given for ",
        src->world_size, " trainer and ", dst->world_size, " engine ranks"));
  }
  std::map<std::string, int32_t> index;
  auto host = [&](const std::string& name, const char* side, size_t rank,
                  std::vector<int32_t>* out) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: ", side, " rank ", rank, " has no host"));
    }
    out->push_back(
        index.emplace(name, static_cast<int32_t>(index.size())).first->second);
    return absl::OkStatus();
  };
  for (size_t r = 0; r < placement.trainer_hosts.size(); ++r) {
    REFIT_RETURN_IF_ERROR(host(placement.trainer_hosts[r], "trainer", r, &src->host_of_rank));
  }
  for (size_t r = 0; r < placement.engine_hosts.size(); ++r) {
    REFIT_RETURN_IF_ERROR(host(placement.engine_hosts[r], "engine", r, &dst->host_of_rank));
  }
  return ApplyGpus(placement, src, dst);
}

}  // namespace

JobPlacement ShorthandPlacement(int32_t trainer_world, int32_t engine_world,
                                int32_t gpus_per_host, bool colocated) {
  const int32_t g = std::max(1, gpus_per_host);
  const int32_t engine_host0 = colocated ? 0 : (trainer_world + g - 1) / g;
  JobPlacement p;
  for (int32_t r = 0; r < trainer_world; ++r) {
    p.trainer_hosts.push_back(absl::StrCat("host", r / g));
    p.trainer_gpus.push_back(absl::StrCat("gpu", r % g));
  }
  for (int32_t r = 0; r < engine_world; ++r) {
    p.engine_hosts.push_back(absl::StrCat("host", engine_host0 + r / g));
    p.engine_gpus.push_back(absl::StrCat("gpu", r % g));
  }
  return p;
}

absl::StatusOr<JobLayouts> MapJob(const ModelConfig& model,
                                  const TrainerSpec& trainer,
                                  const std::vector<JobEngine>& engines) {
  if (engines.empty()) {
    return absl::InvalidArgumentError("a job needs at least one engine");
  }
  JobLayouts out;
  REFIT_ASSIGN_OR_RETURN(
      out.trainer,
      AnnotateStatus(BuildTrainerLayout(model, trainer), "trainer layout"));
  for (const JobEngine& e : engines) {
    REFIT_ASSIGN_OR_RETURN(
        MappedSide m, AnnotateStatus(BuildEngineLayout(model, e.spec),
                                     absl::StrCat("engine '", e.id, "' layout")));
    out.engines.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<Plan> PlanJob(JobLayouts layouts,
                             const std::vector<JobEngine>& engines,
                             const JobPlacement& placement,
                             const PlannerOptions& options) {
  if (layouts.engines.size() != engines.size() || engines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job needs one layout per engine (", layouts.engines.size(),
        " layouts, ", engines.size(), " engines)"));
  }
  SideLayout dst;
  for (size_t e = 0; e < engines.size(); ++e) {
    REFIT_RETURN_IF_ERROR(AppendEngine(layouts.engines[e].layout, engines[e].id, &dst));
    layouts.engines[e].layout = SideLayout();  // appended; free it early
  }
  if (static_cast<int32_t>(dst.stage_of_rank.size()) != dst.world_size) {
    dst.stage_of_rank.clear();
  }
  SideLayout src = std::move(layouts.trainer.layout);
  REFIT_RETURN_IF_ERROR(ApplyPlacement(placement, &src, &dst));
  return BuildPlan(std::move(src), std::move(dst), options);
}

absl::StatusOr<Plan> BuildJobPlan(const JobSpec& spec) {
  REFIT_ASSIGN_OR_RETURN(JobLayouts layouts,
                         MapJob(spec.model, spec.trainer, spec.engines));
  return PlanJob(std::move(layouts), spec.engines, spec.placement, spec.planner);
}

absl::StatusOr<bool> ParseRelayFlag(absl::string_view value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--relay: '", value, "' is neither on nor off"));
}

}  // namespace refit
