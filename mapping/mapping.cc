#include "mapping/mapping.h"

#include "common/status_macros.h"
#include "mapping/engine_vllm.h"
#include "mapping/model_family.h"
#include "mapping/trainer_fsdp.h"
#include "mapping/trainer_megatron.h"

namespace refit {

absl::StatusOr<MappedSide> BuildTrainerLayout(const ModelConfig& config,
                                              const TrainerSpec& spec) {
  REFIT_ASSIGN_OR_RETURN(ModelTensors model, BuildModelTensors(config));
  if (spec.kind == TrainerSpec::Kind::kFsdp) {
    return BuildFsdpLayout(model, spec);
  }
  return BuildMegatronLayout(config, model, spec);
}

absl::StatusOr<MappedSide> BuildEngineLayout(const ModelConfig& config,
                                             const EngineSpec& spec) {
  REFIT_ASSIGN_OR_RETURN(ModelTensors model, EngineModelTensors(config, spec));
  ModelConfig c = config;
  c.fp8_block = model.fp8_block;
  return BuildVllmLayout(c, model, spec);
}

}  // namespace refit
