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
  c.mxfp8 = model.mxfp8;
  c.nvfp4 = model.nvfp4;
  return BuildVllmLayout(c, model, spec);
}

absl::StatusOr<MappedSide> BuildSideLayout(const ModelConfig& config,
                                           bool trainer,
                                           const std::string& convention) {
  if (trainer) {
    REFIT_ASSIGN_OR_RETURN(TrainerSpec spec, ParseTrainerSpec(convention));
    return BuildTrainerLayout(config, spec);
  }
  REFIT_ASSIGN_OR_RETURN(EngineSpec spec, ParseEngineSpec(convention));
  return BuildEngineLayout(config, spec);
}

}  // namespace refit
