// The entry points of mapping/: from a model and a parallel spec to the
// SideLayout the planner takes, and each rank's local buffers.
//
//   REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig("deepseek-v3"));
//   REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec("megatron:tp=1,pp=16,ep=16,dp=16"));
//   REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec("vllm:tp=32,dp=8"));
//   REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
//   REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
//   BuildPlan(src.layout, dst.layout, options);
//
// Both sides list the same logical tensors (BuildModelTensors) in the same
// order; every tensor gets records on both sides or the build fails.
#ifndef REFIT_MAPPING_MAPPING_H_
#define REFIT_MAPPING_MAPPING_H_

#include <string>

#include "absl/status/statusor.h"
#include "mapping/layout_builder.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {

// The trainer's layout (Megatron or FSDP per spec.kind). INVALID_ARGUMENT
// explaining an impossible layout (naming the size, the parallel axis, the
// tensor).
absl::StatusOr<MappedSide> BuildTrainerLayout(const ModelConfig& config,
                                              const TrainerSpec& spec);

// The engine's layout (vLLM). INVALID_ARGUMENT as above.
absl::StatusOr<MappedSide> BuildEngineLayout(const ModelConfig& config,
                                             const EngineSpec& spec);

// One side's layout from its convention's text: a trainer's
// ("megatron:tp=2", "fsdp:dp=4") when `trainer`, else an engine's
// ("vllm:tp=2"). INVALID_ARGUMENT for a convention that does not parse
// (ParseTrainerSpec / ParseEngineSpec) or an impossible layout, as above.
absl::StatusOr<MappedSide> BuildSideLayout(const ModelConfig& config,
                                           bool trainer,
                                           const std::string& convention);

}  // namespace refit

#endif  // REFIT_MAPPING_MAPPING_H_
