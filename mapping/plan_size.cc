// EstimatePlanRecords and CheckPlanBudget (see plan_size.h).
#include "mapping/plan_size.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/model_family.h"

namespace refit {

absl::StatusOr<int64_t> EstimatePlanRecords(const ModelConfig& model,
                                            const TrainerSpec& trainer,
                                            absl::Span<const EngineSpec> engines) {
  REFIT_ASSIGN_OR_RETURN(ModelTensors t, BuildModelTensors(model));
  const int64_t tensors = static_cast<int64_t>(t.tensors.size());
  // Parsed specs hold at most 2^20 ranks each, so the sums stay far from
  // overflow for any number of engines below 2^20.
  const int64_t pp = trainer.kind == TrainerSpec::Kind::kMegatron ? trainer.pp : 1;
  int64_t rank_tensors = tensors * trainer.world_size() / pp;
  for (const EngineSpec& e : engines) rank_tensors += tensors * e.world_size();
  return rank_tensors;
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
