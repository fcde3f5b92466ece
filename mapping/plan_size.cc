// EstimatePlanRecords, CountRankTensors and the checks (see plan_size.h).
#include "mapping/plan_size.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/model_family.h"

namespace refit {

namespace {

// A rank's share of `model`'s tensors: whole tensors, and the expert
// records of stacked ones at `experts_per_rank_divisor` (ep) ranks per
// expert set (1: every rank holds every expert).
struct RankShare {
  int64_t tensors = 0;
  int64_t expert_records = 0;
};

RankShare ShareOf(const ModelTensors& t, int64_t ep) {
  RankShare s;
  s.tensors = static_cast<int64_t>(t.tensors.size());
  for (const TensorSpec& spec : t.tensors) {
    if (!spec.stacked || spec.shape.empty()) continue;
    const int64_t local = (spec.shape[0] + ep - 1) / ep;
    s.expert_records += (local + kExpertsPerRecordEstimate - 1) / kExpertsPerRecordEstimate;
  }
  return s;
}

// Sums `per_rank`(share, ranks) over the trainer (a stage holding 1/pp of
// the tensors) and every engine.
template <typename F>
absl::StatusOr<int64_t> SumOverRanks(const ModelConfig& model, const TrainerSpec& trainer,
                                     absl::Span<const EngineSpec> engines, F per_rank) {
  REFIT_ASSIGN_OR_RETURN(ModelTensors t, BuildModelTensors(model));
  // Parsed specs hold at most 2^20 ranks each and a stacked tensor's
  // experts are a tensor dim: the sums stay far from overflow for any
  // number of engines below 2^20.
  const bool megatron = trainer.kind == TrainerSpec::Kind::kMegatron;
  const int64_t pp = megatron ? trainer.pp : 1;
  int64_t sum = per_rank(ShareOf(t, megatron ? std::max(trainer.ep, 1) : 1),
                         int64_t{trainer.world_size()}) / pp;
  for (const EngineSpec& e : engines) {
    sum += per_rank(ShareOf(t, e.ep > 0 ? e.ep : 1), int64_t{e.world_size()});
  }
  return sum;
}

}  // namespace

absl::StatusOr<int64_t> EstimatePlanRecords(const ModelConfig& model,
                                            const TrainerSpec& trainer,
                                            absl::Span<const EngineSpec> engines) {
  return SumOverRanks(model, trainer, engines, [](const RankShare& s, int64_t ranks) {
    return (s.tensors + s.expert_records) * ranks;
  });
}

absl::StatusOr<int64_t> CountRankTensors(const ModelConfig& model, const TrainerSpec& trainer,
                                         absl::Span<const EngineSpec> engines) {
  return SumOverRanks(model, trainer, engines,
                      [](const RankShare& s, int64_t ranks) { return s.tensors * ranks; });
}

absl::Status CheckRegisteredBuffers(const ModelConfig& model, const TrainerSpec& trainer,
                                    absl::Span<const EngineSpec> engines,
                                    int64_t registered) {
  // Parsed specs hold at most 2^20 ranks and configs at most 2^16 layers:
  // no overflow below 2^20 engines.
  const int64_t pp = trainer.kind == TrainerSpec::Kind::kMegatron ? trainer.pp : 1;
  int64_t ranks = trainer.world_size();
  int64_t implied = (model.num_layers / pp) * trainer.world_size();
  for (const EngineSpec& e : engines) {
    implied += model.num_layers * e.world_size();
    ranks += e.world_size();
  }
  if (implied <= registered) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model_config: num_hidden_layers = ", model.num_layers, " implies at least ", implied,
      " buffers on the members' ", ranks, " ranks (one per layer a rank holds), but they "
      "registered ", registered, " in all"));
}

absl::Status CheckRecordsAgainstRegistered(int64_t records, int64_t registered) {
  if (records <= registered * kMaxRecordsPerRegisteredBuffer) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model_config: the model's numbers imply about ", records,
      " tensors on the members' ranks, more than ", kMaxRecordsPerRegisteredBuffer,
      " per buffer the members registered (", registered, " in all)"));
}

absl::Status CheckPlanBudget(int64_t records, int64_t budget_bytes,
                             absl::string_view budget_name) {
  if (records <= budget_bytes / kPlanBytesPerRecordEstimate) return absl::OkStatus();
  const int64_t mib = (records / 1024) * kPlanBytesPerRecordEstimate / 1024;
  return absl::ResourceExhaustedError(absl::StrCat(
      "the plan would hold about ", records, " records (~", mib,
      " MiB), over the plan memory budget ", budget_name, " = ",
      budget_bytes >> 20, " MiB; use fewer ranks or raise ", budget_name));
}

}  // namespace refit
