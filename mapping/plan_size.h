// An estimate of a plan's size from the model and the conventions alone,
// before any layout is built: what refitd and `refit plan` check against a
// memory budget, so that a convention with a huge world (dp=1048576) is
// refused at once instead of growing the process until it is killed.
#ifndef REFIT_MAPPING_PLAN_SIZE_H_
#define REFIT_MAPPING_PLAN_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {

// Bytes of planner memory per estimated record (a layout record, its
// segments and messages, its slice's share). Measured: ~650 B for a
// replicated dense model, ~1.5 KiB for DeepSeek-V3 at 256+256 ranks.
inline constexpr int64_t kPlanBytesPerRecordEstimate = 2048;

// Per-expert parts of a stacked (MoE) tensor that cost the planner what one
// record does: where one side holds experts in buffers of their own (e.g.
// Megatron's local experts) every expert is a record and a segment of its
// own. Measured with `refit plan` (tiny-qwen3-moe, megatron:tp=1 and
// vllm:tp=1, 1,024 to 2,048 layers, 128 and 256 experts): ~230 B per expert
// and rank.
inline constexpr int64_t kExpertsPerRecordEstimate = 4;

// Returns the estimated number of records a plan between `trainer` and the
// engines `engines` holds for `model`: per rank, one per logical tensor it
// holds, and for a stacked (per-expert) tensor also one per
// kExpertsPerRecordEstimate of the experts the rank holds (all of them,
// or 1/ep of them with expert parallelism). A pipeline stage holds 1/pp of
// the tensors; every engine rank holds a slice of every tensor. Fails with
// INVALID_ARGUMENT when the model is inconsistent (BuildModelTensors).
absl::StatusOr<int64_t> EstimatePlanRecords(const ModelConfig& model,
                                            const TrainerSpec& trainer,
                                            absl::Span<const EngineSpec> engines);

// Returns the number of logical tensors the ranks of `trainer` and
// `engines` hold in all (a stacked tensor counted once per rank): what
// CheckRecordsAgainstRegistered compares with the registered buffers. Fails
// with INVALID_ARGUMENT when the model is inconsistent.
absl::StatusOr<int64_t> CountRankTensors(const ModelConfig& model, const TrainerSpec& trainer,
                                         absl::Span<const EngineSpec> engines);

// Returns OK when the members could hold `model` with the `registered`
// buffers they registered in all: every rank holds at least one buffer per
// layer it holds (a trainer pipeline stage holds num_hidden_layers / pp of
// them, every other rank all). Else INVALID_ARGUMENT naming
// num_hidden_layers, the buffers it implies and those registered. Cheap
// (no tensor is built): refitd checks it before anything is sized by the
// model's numbers, so a config.json claiming 65,536 layers costs nothing.
absl::Status CheckRegisteredBuffers(const ModelConfig& model, const TrainerSpec& trainer,
                                    absl::Span<const EngineSpec> engines,
                                    int64_t registered);

// The most logical tensors per rank that one registered buffer may hold
// (fused projections: q, k and v in one buffer; gate and up in one).
inline constexpr int64_t kMaxRecordsPerRegisteredBuffer = 4;

// Returns OK when `records` (CountRankTensors) is at most
// kMaxRecordsPerRegisteredBuffer times the `registered` buffers; else
// INVALID_ARGUMENT naming model_config and both figures: the model's
// numbers claim far more tensors than the members hold.
absl::Status CheckRecordsAgainstRegistered(int64_t records, int64_t registered);

// Returns OK when `records` estimated records (times
// kPlanBytesPerRecordEstimate) fit in `budget_bytes`; else RESOURCE_EXHAUSTED
// naming the estimate and `budget_name` (the flag or option that sets it).
absl::Status CheckPlanBudget(int64_t records, int64_t budget_bytes,
                             absl::string_view budget_name);

}  // namespace refit

#endif  // REFIT_MAPPING_PLAN_SIZE_H_
