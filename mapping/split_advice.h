// Why an engine convention cannot split a model, said the way a user fixes
// it: every model dimension the engine's TP does not divide (attention
// heads first, as vLLM and SGLang themselves check them), and the nearest
// TP sizes whose layout does build.
#ifndef REFIT_MAPPING_SPLIT_ADVICE_H_
#define REFIT_MAPPING_SPLIT_ADVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {

// Returns one line per dimension of `model` that tensor parallelism `tp`
// does not split evenly: "num_attention_heads (32) is not divisible by
// tp=3", the KV heads (neither a divisor nor a multiple of tp), the MLP's
// intermediate_size, and the experts' moe_intermediate_size when experts
// are TP-sharded (`experts_tp_sharded`). Empty when all divide.
std::vector<std::string> TensorParallelProblems(const ModelConfig& model, int32_t tp,
                                                bool experts_tp_sharded);

// Returns the TP sizes nearest spec.tp (at most one below and one above,
// among 1 .. 4 * spec.tp) whose engine layout builds with spec's other
// settings (ep following tp where vLLM needs ep = tp * dp); at most
// `max_tries` layouts are built.
std::vector<int32_t> NearestValidTensorParallel(const ModelConfig& model,
                                                const EngineSpec& spec, int max_tries = 12);

// Returns `error` (the engine layout's INVALID_ARGUMENT for `spec`) with
// every TensorParallelProblems line ("engine vllm:tp=3,dp=1: ...") before
// the layout's own message and
// the nearest valid TP sizes after it ("valid near tp=3: tp=2
// (vllm:tp=2,dp=1), tp=4 (vllm:tp=4,dp=1)"). Other codes are returned as
// they are.
absl::Status ExplainEngineSplit(const ModelConfig& model, const EngineSpec& spec,
                                const absl::Status& error);

// BuildSideLayout (mapping/mapping.h), with an engine convention's
// INVALID_ARGUMENT explained by ExplainEngineSplit.
absl::StatusOr<MappedSide> BuildSideLayoutExplained(const ModelConfig& model, bool trainer,
                                                    const std::string& convention);

// Every layout error of a job whose layouts failed with `error`: the
// trainer's (BuildTrainerLayout) and the engine's, explained
// (ExplainEngineSplit), one after the other; `error` when neither side
// fails alone.
absl::Status JobLayoutErrors(const ModelConfig& model, const TrainerSpec& trainer,
                             const EngineSpec& engine, const absl::Status& error);

}  // namespace refit

#endif  // REFIT_MAPPING_SPLIT_ADVICE_H_
