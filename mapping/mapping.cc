#include "mapping/mapping.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "mapping/engine_vllm.h"
#include "mapping/model_family.h"
#include "mapping/trainer_fsdp.h"
#include "mapping/trainer_megatron.h"

namespace refit {

absl::StatusOr<MappedSide> BuildTrainerLayout(const ModelConfig& config,
                                              const TrainerSpec& spec) {
  if (spec.kind == TrainerSpec::Kind::kFsdp) {
    REFIT_ASSIGN_OR_RETURN(ModelTensors model, BuildModelTensors(config));
    return BuildFsdpLayout(model, spec);
  }
  // weights=mxfp8|nvfp4: the linear weights as TE's native tensors, the
  // same logical tensors (names, shapes, dtypes) as the engine's quant=.
  ModelConfig c = config;
  if (spec.weights.has_value()) {
    if (c.quant.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer ", TrainerSpecString(spec), ": weights= describes a BF16 model "
          "trained in TE's native MXFP8/NVFP4 tensors; the model config is already "
          "quantized (--dtype bf16 gives its BF16 form)"));
    }
    c.quant = spec.weights;
  }
  REFIT_ASSIGN_OR_RETURN(ModelTensors model, BuildModelTensors(c));
  return BuildMegatronLayout(c, model, spec);
}

absl::StatusOr<MappedSide> BuildEngineLayout(const ModelConfig& config,
                                             const EngineSpec& spec) {
  REFIT_ASSIGN_OR_RETURN(ModelTensors model, EngineModelTensors(config, spec));
  ModelConfig c = config;
  c.quant = model.quant;
  c.fp8_block = model.fp8_block;
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
