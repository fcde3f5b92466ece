// Engine split advice (see split_advice.h).
#include "mapping/split_advice.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

std::string NotDivisible(const char* what, int64_t n, int32_t tp) {
  return absl::StrCat(what, " (", n, ") is not divisible by tp=", tp);
}

// `spec` with tensor parallelism `tp`, and expert parallelism following it
// where vLLM ties it to tp * dp; false when `tp` cannot hold spec's ep.
bool WithTensorParallel(const EngineSpec& spec, int32_t tp, EngineSpec* out) {
  *out = spec;
  out->tp = tp;
  if (spec.ep == 0) return true;
  if (spec.kind == EngineSpec::Kind::kVllm) {
    out->ep = tp * spec.dp;
    return true;
  }
  return tp % spec.ep == 0;  // SGLang: ep divides tp
}

}  // namespace

std::vector<std::string> TensorParallelProblems(const ModelConfig& model, int32_t tp,
                                                bool experts_tp_sharded) {
  std::vector<std::string> out;
  if (tp <= 1) return out;
  if (model.num_heads > 0 && model.num_heads % tp != 0) {
    out.push_back(NotDivisible("num_attention_heads", model.num_heads, tp));
  }
  const int64_t kv = model.num_kv_heads;
  if (kv > 0 && kv != model.num_heads && kv % tp != 0 && tp % kv != 0) {
    out.push_back(absl::StrCat("num_key_value_heads (", kv,
                               ") is neither a divisor nor a multiple of tp=", tp));
  }
  if (model.intermediate_size > 0 && model.intermediate_size % tp != 0) {
    out.push_back(NotDivisible("intermediate_size", model.intermediate_size, tp));
  }
  if (experts_tp_sharded && model.num_experts > 0 && model.moe_intermediate_size > 0 &&
      model.moe_intermediate_size % tp != 0) {
    out.push_back(NotDivisible("moe_intermediate_size", model.moe_intermediate_size, tp));
  }
  return out;
}

std::vector<int32_t> NearestValidTensorParallel(const ModelConfig& model,
                                                const EngineSpec& spec, int max_tries) {
  std::vector<int32_t> candidates;
  for (int32_t t = 1; t <= 4 * spec.tp; ++t) {
    if (t != spec.tp) candidates.push_back(t);
  }
  // Nearest first; of two equally near, the smaller. Sizes that leave a
  // model dimension split unevenly cannot build: skipped without a try.
  std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    return std::abs(a - spec.tp) < std::abs(b - spec.tp);
  });
  std::vector<int32_t> below, above;
  int tries = 0;
  for (int32_t t : candidates) {
    if ((t < spec.tp && !below.empty()) || (t > spec.tp && !above.empty())) continue;
    if (!below.empty() && !above.empty()) break;
    EngineSpec s;
    if (!WithTensorParallel(spec, t, &s)) continue;
    if (!TensorParallelProblems(model, t, spec.ep == 0).empty()) continue;
    if (tries++ >= max_tries) break;
    if (BuildEngineLayout(model, s).ok()) (t < spec.tp ? below : above).push_back(t);
  }
  below.insert(below.end(), above.begin(), above.end());
  return below;
}

absl::Status ExplainEngineSplit(const ModelConfig& model, const EngineSpec& spec,
                                const absl::Status& error) {
  if (!absl::IsInvalidArgument(error)) return error;
  std::vector<std::string> lines;
  for (const std::string& p : TensorParallelProblems(model, spec.tp, spec.ep == 0)) {
    lines.push_back(absl::StrCat("engine ", EngineSpecString(spec), ": ", p));
  }
  lines.push_back(std::string(error.message()));
  std::vector<std::string> valid;
  for (int32_t t : NearestValidTensorParallel(model, spec)) {
    EngineSpec s;
    WithTensorParallel(spec, t, &s);
    valid.push_back(absl::StrCat("tp=", t, " (", EngineSpecString(s), ")"));
  }
  if (!valid.empty()) {
    lines.push_back(absl::StrCat("valid near tp=", spec.tp, ": ", absl::StrJoin(valid, ", ")));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

absl::StatusOr<MappedSide> BuildSideLayoutExplained(const ModelConfig& model, bool trainer,
                                                    const std::string& convention) {
  absl::StatusOr<MappedSide> side = BuildSideLayout(model, trainer, convention);
  if (side.ok() || trainer) return side;
  absl::StatusOr<EngineSpec> spec = ParseEngineSpec(convention);
  if (!spec.ok()) return side;
  return ExplainEngineSplit(model, *spec, side.status());
}

absl::Status JobLayoutErrors(const ModelConfig& model, const TrainerSpec& trainer,
                             const EngineSpec& engine, const absl::Status& error) {
  std::vector<std::string> errors;
  if (absl::StatusOr<MappedSide> t = BuildTrainerLayout(model, trainer); !t.ok()) {
    errors.push_back(std::string(t.status().message()));  // names the trainer
  }
  if (absl::StatusOr<MappedSide> e = BuildEngineLayout(model, engine); !e.ok()) {
    errors.push_back(std::string(ExplainEngineSplit(model, engine, e.status()).message()));
  }
  if (errors.empty()) return error;
  return absl::Status(error.code(), absl::StrJoin(errors, "\n"));
}

}  // namespace refit
