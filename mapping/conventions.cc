#include "mapping/conventions.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {
namespace {

bool Matches(LayerMatch m, const LayerKind& k) {
  switch (m) {
    case LayerMatch::kAny: return true;
    case LayerMatch::kGqa: return k.mixer == Mixer::kGqa;
    case LayerMatch::kMla: return k.mixer == Mixer::kMla;
    case LayerMatch::kMamba: return k.mixer == Mixer::kMamba;
    case LayerMatch::kGated: return k.ffn == Ffn::kGated;
    case LayerMatch::kNonGated: return k.ffn == Ffn::kNonGated;
    case LayerMatch::kMoeGated: return k.ffn == Ffn::kMoeGated;
    case LayerMatch::kMoeNonGated: return k.ffn == Ffn::kMoeNonGated;
    case LayerMatch::kMoe: return IsMoe(k.ffn);
  }
  return false;
}

// Origins and buffer positions: inline, no allocation per placement.
Box::Indices Zeros(size_t n) { return Box::Indices(n, 0); }

// Shape with dim d replaced.
std::vector<int64_t> With(std::vector<int64_t> s, size_t d, int64_t v) {
  s[d] = v;
  return s;
}

std::vector<DimPlace> Plain(size_t n) { return std::vector<DimPlace>(n); }

// Places components of dim 0 of `t` (global sizes `comps`, consecutive in the
// tensor), each sharded evenly over TP (or whole on every rank where
// `whole[k]`), concatenated in the buffer.
absl::Status PlaceComponents(LayoutBuilder& b, const RankCtx& ctx,
                             int32_t t, const std::string& name,
                             absl::Span<const int64_t> comps,
                             absl::Span<const bool> whole) {
  const std::vector<int64_t>& sh = b.model().tensors[t].shape;
  const std::string& tname = b.model().tensors[t].name;
  int64_t local_total = 0;
  for (size_t k = 0; k < comps.size(); ++k) {
    if (whole[k]) {
      local_total += comps[k];
      continue;
    }
    REFIT_RETURN_IF_ERROR(CheckDivides(
        comps[k], ctx.tp, [&] { return absl::StrCat(tname, " component ", k, " rows"); },
        "tp"));
    local_total += comps[k] / ctx.tp;
  }
  REFIT_ASSIGN_OR_RETURN(int32_t buf,
                         b.Buffer(ctx.rank, name, With(sh, 0, local_total), t));
  int64_t global_off = 0, local_off = 0;
  for (size_t k = 0; k < comps.size(); ++k) {
    const int64_t comp = comps[k];
    const int64_t l = whole[k] ? comp : comp / ctx.tp;
    Box::Indices at = Zeros(sh.size());
    at[0] = local_off;
    Box::Indices origin = Zeros(sh.size());
    origin[0] = global_off + (whole[k] ? 0 : ctx.tp_rank * l);
    REFIT_RETURN_IF_ERROR(
        b.PlaceAt(t, buf, MakeBox(origin, With(sh, 0, l)), at));
    global_off += comp;
    local_off += l;
  }
  return absl::OkStatus();
}

absl::Status PlaceExperts(LayoutBuilder& b, const RankCtx& ctx,
                          const RuleRow& row, const LayerKind& kind,
                          int32_t t, const std::string& name) {
  const std::vector<int64_t>& sh = b.model().tensors[t].shape;  // [E, r, c]
  const std::string& tname = b.model().tensors[t].name;
  if (ctx.expert_count == 0) return absl::OkStatus();
  const bool gated = kind.ffn == Ffn::kMoeGated;
  const bool down = row.part == 2;
  const int64_t inter = down ? sh[2] : sh[1];
  REFIT_RETURN_IF_ERROR(CheckDivides(
      inter, ctx.etp, [&] { return absl::StrCat(tname, " moe_intermediate_size"); },
      "expert tp"));
  const int64_t il = inter / ctx.etp;
  const int64_t i0 = ctx.etp_rank * il;
  // Local [rows, cols] of one expert and where this part lands in it.
  std::vector<int64_t> local;
  Box::Indices origin = {ctx.expert_begin, 0, 0};
  Box::Indices extent = {ctx.expert_count, sh[1], sh[2]};
  DimPlace rows_place;
  if (down) {
    local = {sh[1], il};
    origin[2] = i0;
    extent[2] = il;
  } else {
    local = {gated ? 2 * il : il, sh[2]};
    origin[1] = i0;
    extent[1] = il;
    if (gated && ctx.glu_chunk > 0) {
      REFIT_RETURN_IF_ERROR(CheckDivides(
          il, ctx.glu_chunk, [&] { return absl::StrCat(tname, " local rows"); }, "glu_chunk"));
      rows_place = {row.part * ctx.glu_chunk, ctx.glu_chunk,
                    2 * ctx.glu_chunk};
    } else if (gated) {
      rows_place = {row.part * il, 0, 0};
    }
  }
  std::vector<DimPlace> places = {DimPlace{}, DimPlace{}, DimPlace{}};
  if (!down) places[1] = rows_place;
  // Per-tensor FP8 scale entries: [gate, up] of fc1 (gated), else one.
  const int parts = !down && gated ? 2 : 1;
  const int part = !down && gated ? row.part : 0;
  if (ctx.expert_style == ExpertStyle::kGrouped) {
    REFIT_ASSIGN_OR_RETURN(
        int32_t buf,
        b.Buffer(ctx.rank, name, {ctx.expert_count, local[0], local[1]}, t, 0,
                 0, parts));
    if (ctx.expert_stride == 1) {
      return b.Place(t, buf, MakeBox(origin, extent), places, part);
    }
    // Strided experts (vLLM round-robin): global expert begin + j*stride is
    // local expert j of the one buffer.
    for (int64_t j = 0; j < ctx.expert_count; ++j) {
      Box::Indices o = origin, e = extent;
      o[0] = ctx.expert_begin + j * ctx.expert_stride;
      e[0] = 1;
      std::vector<DimPlace> at = places;
      at[0].at = j;
      REFIT_RETURN_IF_ERROR(b.Place(t, buf, MakeBox(o, e), at, part));
    }
    return absl::OkStatus();
  }
  for (int64_t j = 0; j < ctx.expert_count; ++j) {
    REFIT_ASSIGN_OR_RETURN(
        int32_t buf,
        b.Buffer(ctx.rank, absl::StrCat(name, j), local, t, 0, 0, parts));
    Box::Indices o = origin, e = extent;
    o[0] = ctx.expert_begin + j * ctx.expert_stride;
    e[0] = 1;
    REFIT_RETURN_IF_ERROR(b.Place(t, buf, MakeBox(o, e), places, part));
  }
  return absl::OkStatus();
}

}  // namespace

const RuleRow* FindRule(absl::Span<const RuleRow> table, Role role,
                        const LayerKind& kind, bool global) {
  for (const RuleRow& r : table) {
    if (r.role == role && (global || Matches(r.when, kind))) return &r;
  }
  return nullptr;
}

namespace {

absl::Status ApplyRuleImpl(LayoutBuilder& b, const ModelConfig& c,
                           const RankCtx& ctx, const RuleRow& row,
                           const LayerKind& kind, int32_t t,
                           const std::string& name) {
  const TensorSpec& spec = b.model().tensors[t];
  const std::vector<int64_t>& sh = spec.shape;
  const size_t rank = sh.size();
  switch (row.rule) {
    case Rule::kReplicate: {
      REFIT_ASSIGN_OR_RETURN(int32_t buf, b.Buffer(ctx.rank, name, sh, t));
      return b.PlaceAt(t, buf, MakeBox(Zeros(rank), sh), Zeros(rank));
    }
    case Rule::kVocab: {
      REFIT_RETURN_IF_ERROR(CheckDivides(
          ctx.vocab_padded, ctx.tp,
          [&] { return absl::StrCat(spec.name, " padded vocabulary"); }, "tp"));
      const int64_t vl = ctx.vocab_padded / ctx.tp;
      const int64_t begin = ctx.tp_rank * vl;
      const int64_t held = std::max<int64_t>(0, std::min(vl, sh[0] - begin));
      REFIT_ASSIGN_OR_RETURN(
          int32_t buf, b.Buffer(ctx.rank, name, With(sh, 0, vl), t, held, vl));
      if (held == 0) return absl::OkStatus();
      return b.PlaceAt(t, buf, MakeBox({begin, 0}, With(sh, 0, held)),
                       Zeros(rank));
    }
    case Rule::kColumn:
    case Rule::kRow: {
      const size_t d = row.rule == Rule::kColumn ? 0 : 1;
      REFIT_RETURN_IF_ERROR(CheckDivides(
          sh[d], ctx.tp, [&] { return absl::StrCat(spec.name, " dim ", d); }, "tp"));
      const int64_t l = sh[d] / ctx.tp;
      REFIT_ASSIGN_OR_RETURN(int32_t buf,
                             b.Buffer(ctx.rank, name, With(sh, d, l), t));
      Box::Indices origin = Zeros(rank);
      origin[d] = ctx.tp_rank * l;
      return b.PlaceAt(t, buf, MakeBox(origin, With(sh, d, l)), Zeros(rank));
    }
    case Rule::kQkvGrouped: {
      const int64_t nq = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
      REFIT_RETURN_IF_ERROR(CheckDivides(
          nkv, ctx.tp, "megatron linear_qkv: num_key_value_heads (query groups)",
          "tp"));
      const int64_t g = nkv / ctx.tp, qpg = nq / nkv, period = (qpg + 2) * hd;
      REFIT_ASSIGN_OR_RETURN(
          int32_t buf,
          b.Buffer(ctx.rank, name, With(sh, 0, g * period), t, 0, 0, 3));
      const int64_t rows = row.part == 0 ? qpg * hd : hd;
      const int64_t at = row.part == 0 ? 0 : (qpg + row.part - 1) * hd;
      Box::Indices origin = Zeros(rank);
      origin[0] = ctx.tp_rank * g * rows;
      std::vector<DimPlace> places = Plain(rank);
      places[0] = {at, rows, period};
      return b.Place(t, buf, MakeBox(origin, With(sh, 0, g * rows)), places,
                     row.part);
    }
    case Rule::kQkvReplicated: {
      const int64_t nq = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
      REFIT_RETURN_IF_ERROR(CheckDivides(
          nq, ctx.tp, "vllm qkv_proj: num_attention_heads", "tp"));
      int64_t kvl, kv_head;
      if (ctx.tp >= nkv) {
        if (ctx.tp % nkv != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "vllm qkv_proj: tp=", ctx.tp,
              " is neither a divisor nor a multiple of num_key_value_heads (",
              nkv, ")"));
        }
        kvl = 1;
        kv_head = ctx.tp_rank / (ctx.tp / nkv);
      } else {
        REFIT_RETURN_IF_ERROR(CheckDivides(
            nkv, ctx.tp, "vllm qkv_proj: num_key_value_heads", "tp"));
        kvl = nkv / ctx.tp;
        kv_head = ctx.tp_rank * kvl;
      }
      const int64_t ql = nq / ctx.tp;
      REFIT_ASSIGN_OR_RETURN(
          int32_t buf,
          b.Buffer(ctx.rank, name, With(sh, 0, (ql + 2 * kvl) * hd), t, 0, 0,
                   3));
      Box::Indices origin = Zeros(rank), at = Zeros(rank);
      int64_t rows;
      if (row.part == 0) {
        origin[0] = ctx.tp_rank * ql * hd;
        rows = ql * hd;
      } else {
        origin[0] = kv_head * hd;
        rows = kvl * hd;
        at[0] = (ql + (row.part - 1) * kvl) * hd;
      }
      return b.PlaceAt(t, buf, MakeBox(origin, With(sh, 0, rows)), at,
                       row.part);
    }
    case Rule::kGlu: {
      REFIT_RETURN_IF_ERROR(CheckDivides(sh[0], ctx.tp, spec.name, "tp"));
      const int64_t il = sh[0] / ctx.tp;
      REFIT_ASSIGN_OR_RETURN(
          int32_t buf, b.Buffer(ctx.rank, name, With(sh, 0, 2 * il), t, 0, 0, 2));
      return b.PlaceAt(t, buf,
                       MakeBox({ctx.tp_rank * il, 0}, With(sh, 0, il)),
                       {row.part * il, 0}, row.part);
    }
    case Rule::kConcat: {
      // The only concatenation: MLA fused_qkv_a_proj = [q_a; kv_a_with_mqa].
      const int64_t total =
          c.q_lora_rank + c.kv_lora_rank + c.qk_rope_head_dim;
      const int64_t at = row.part == 0 ? 0 : c.q_lora_rank;
      REFIT_ASSIGN_OR_RETURN(
          int32_t buf, b.Buffer(ctx.rank, name, With(sh, 0, total), t, 0, 0, 2));
      return b.PlaceAt(t, buf, MakeBox(Zeros(rank), sh), {at, 0}, row.part);
    }
    case Rule::kMambaInProj: {
      const int64_t mi = c.mamba_intermediate();
      const int64_t gn = c.n_groups * c.ssm_state_size;
      const bool one = ctx.replicate_single_group && c.n_groups == 1;
      if (!one) {
        REFIT_RETURN_IF_ERROR(
            CheckDivides(c.n_groups, ctx.tp, "mamba n_groups", "tp"));
      }
      REFIT_RETURN_IF_ERROR(
          CheckDivides(c.mamba_num_heads, ctx.tp, "mamba_num_heads", "tp"));
      const int64_t comps[] = {mi, mi, gn, gn, c.mamba_num_heads};
      const bool whole[] = {false, false, one, one, false};
      return PlaceComponents(b, ctx, t, name, comps, whole);
    }
    case Rule::kMambaConv: {
      const int64_t gn = c.n_groups * c.ssm_state_size;
      const bool one = ctx.replicate_single_group && c.n_groups == 1;
      if (!one) {
        REFIT_RETURN_IF_ERROR(
            CheckDivides(c.n_groups, ctx.tp, "mamba n_groups", "tp"));
      }
      const int64_t comps[] = {c.mamba_intermediate(), gn, gn};
      const bool whole[] = {false, one, one};
      return PlaceComponents(b, ctx, t, name, comps, whole);
    }
    case Rule::kExpert:
      return PlaceExperts(b, ctx, row, kind, t, name);
  }
  return absl::InternalError("unknown rule");
}

}  // namespace

absl::Status ApplyRule(LayoutBuilder& b, const ModelConfig& c,
                       const RankCtx& ctx, const RuleRow& row,
                       const LayerKind& kind, int32_t t,
                       const std::string& name) {
  absl::Status s = ApplyRuleImpl(b, c, ctx, row, kind, t, name);
  if (s.ok() || absl::StartsWith(s.message(), b.side())) return s;
  return AnnotateStatus(s, absl::StrCat(b.side(), ", rank ", ctx.rank));
}

}  // namespace refit
