// The placement rules shared by the trainer and engine conventions, and the
// one interpreter that turns a rule row into buffers and records.
//
// A convention is a table of RuleRow {role, which layers, buffer name,
// rule, part}: the first row whose role and layer kind match a logical
// tensor places it. Every rule works on the same per-rank context (RankCtx):
// the tensor-parallel coordinate, the rank's experts and their intermediate
// slice, the padded vocabulary. Internal to mapping/.
#ifndef REFIT_MAPPING_CONVENTIONS_H_
#define REFIT_MAPPING_CONVENTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "mapping/layout_builder.h"
#include "mapping/model_config.h"
#include "mapping/model_family.h"

namespace refit {

enum class Rule {
  kReplicate,      // whole tensor on every rank
  kVocab,          // rows vocab-parallel over TP, padded (rows past vocab unsourced)
  kColumn,         // Shard(0), even over TP
  kRow,            // Shard(1), even over TP
  kQkvGrouped,     // Megatron linear_qkv: per local query group [q heads; k; v]
  kQkvReplicated,  // vLLM qkv_proj: [q_l; k_l; v_l], KV heads replicated when TP > kv heads
  kGlu,            // [gate_l; up_l] over TP; part 0 = gate, 1 = up
  kConcat,         // replicated row concatenation; part k after parts < k
  kMambaInProj,    // [z_l; x_l; B_l; C_l; dt_l], each component over TP
  kMambaConv,      // [x_l; B_l; C_l], each component over TP
  kExpert,         // expert weights; part 0 = gate, 1 = up, 2 = down
};

// Which layers a row applies to.
enum class LayerMatch {
  kAny, kGqa, kMla, kMamba, kGated, kNonGated, kMoeGated, kMoeNonGated, kMoe,
};

struct RuleRow {
  Role role;
  LayerMatch when;
  // Megatron: the parameter name after "decoder.layers.<l>." (or a global
  // name). vLLM: a substitution "from>to" applied to the HF name, or "" to
  // keep the HF name.
  const char* name;
  Rule rule;
  int part;
};

enum class ExpertStyle {
  kIndexed,  // Megatron TEGroupedMLP: buffer "<name><j>" per local expert j
  kGrouped,  // one [E_local, rows, cols] buffer per weight
};

struct RankCtx {
  int32_t rank = 0;
  int64_t tp = 1;
  int64_t tp_rank = 0;
  // Experts held: expert_begin + j * expert_stride for j in [0,
  // expert_count) (local expert j), each with intermediate slice etp_rank
  // of etp.
  int64_t expert_begin = 0;
  int64_t expert_count = 0;
  int64_t expert_stride = 1;
  int64_t etp = 1;
  int64_t etp_rank = 0;
  ExpertStyle expert_style = ExpertStyle::kGrouped;
  int64_t glu_chunk = 0;     // expert fc1 gate/up interleave (0 = none)
  int64_t vocab_padded = 0;  // global padded vocabulary rows
  // Mamba2 with n_groups == 1 and TP > 1: every rank holds the one group's
  // B and C (vLLM); false: n_groups must divide TP (Megatron).
  bool replicate_single_group = false;
};

// The first row of `table` for (role, layer kind), or nullptr.
const RuleRow* FindRule(absl::Span<const RuleRow> table, Role role,
                        const LayerKind& kind, bool global);

// Places `tensor` (of `layer`, -1 for global) on ctx.rank into buffer
// `buffer_name` by `row`. INVALID_ARGUMENT, naming tensor and the parallel
// size, when the layout is impossible (a size not divisible by TP, ...).
absl::Status ApplyRule(LayoutBuilder& b, const ModelConfig& c,
                       const RankCtx& ctx, const RuleRow& row,
                       const LayerKind& kind, int32_t tensor,
                       const std::string& buffer_name);

}  // namespace refit

#endif  // REFIT_MAPPING_CONVENTIONS_H_
