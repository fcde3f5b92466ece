// Megatron-Core's and HF / FSDP's local buffers per rank, stated
// independently of mapping/'s tables (conventions_reference.h).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/conventions_reference.h"

namespace refit::testing {

using testing_mapping::Arr;
using testing_mapping::Bufs;
using testing_mapping::Cat;
using testing_mapping::Member;
using testing_mapping::Slice;

namespace {

std::vector<int64_t> StageSizes(int64_t layers, const MegatronOpts& o) {
  std::vector<int64_t> s(o.pp);
  if (o.first > 0 || o.last > 0) {
    const int64_t mid = o.pp - 2;
    for (auto& x : s) x = mid > 0 ? (layers - o.first - o.last) / mid : 0;
    s[0] = o.first;
    s[o.pp - 1] = o.last;
  } else {
    for (int64_t i = 0; i < o.pp; ++i) s[i] = layers / o.pp + (i < layers % o.pp);
  }
  return s;
}

// [gate rows; up rows], or alternating chunks of `chunk` rows.
Piece Glu(const Piece& gate, const Piece& up, int64_t chunk) {
  if (chunk == 0) return CatRows({gate, up});
  std::vector<Piece> parts;
  const int64_t n = gate.w.shape[gate.w.shape.size() - 2];
  for (int64_t b = 0; b < n; b += chunk) {
    parts.push_back(Rows(gate, b, chunk));
    parts.push_back(Rows(up, b, chunk));
  }
  Piece out = CatRows(parts);
  if (out.pt) out.s = Cat(static_cast<int>(gate.s.shape.size()) - 1, {gate.s, up.s});
  return out;
}

}  // namespace

std::vector<Bufs> ExpectMegatron(const ModelConfig& c, Checkpoint& ck,
                                 const MegatronOpts& o) {
  const int64_t tp = o.tp, world = o.tp * o.pp * o.dp, H = c.hidden_size;
  const int64_t hd = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads;
  const int64_t E = c.num_experts;
  const bool nem = c.family == ModelFamily::kNemotronH;
  const std::string hl = nem ? "backbone.layers." : "model.layers.";
  const std::vector<int64_t> sizes = StageSizes(c.num_layers, o);
  const int64_t vp = Up(c.vocab_size, 128 * tp);
  std::vector<Bufs> out(world);
  for (int64_t k = 0; k < world; ++k) {
    const int64_t r = k % tp, stage = k / (tp * o.dp), w = k % (tp * o.dp);
    const int64_t er = w % o.etp, epr = (w / o.etp) % o.ep;
    Bufs& B = out[k];
    Piece embed = ck.P(nem ? "backbone.embeddings.weight" : "model.embed_tokens.weight",
                       {c.vocab_size, H});
    if (stage == 0) {
      Put(B, "embedding.word_embeddings.weight", Vocab(embed, c.vocab_size, vp, tp, r));
    }
    int64_t l0 = 0;
    for (int64_t s = 0; s < stage; ++s) l0 += sizes[s];
    for (int64_t l = l0; l < l0 + sizes[stage]; ++l) {
      const std::string h = absl::StrCat(hl, l, ".");
      const std::string m = absl::StrCat("decoder.layers.", l - l0, ".");
      bool gqa = false, mla = false, mamba = false, dense = false,
           nongated = false, moe = false;
      if (nem) {
        HybridBlock blk = c.hybrid_pattern[l];
        gqa = blk == HybridBlock::kAttention;
        mamba = blk == HybridBlock::kMamba;
        nongated = blk == HybridBlock::kMlp;
        moe = blk == HybridBlock::kMoe;
        const char* norm = mamba ? "mixer.in_proj.layer_norm_weight"
                           : gqa ? "self_attention.linear_qkv.layer_norm_weight"
                           : moe ? "pre_mlp_layernorm.weight"
                                 : "mlp.linear_fc1.layer_norm_weight";
        Put(B, m + norm, ck.P(h + "norm.weight", {H}));
      } else {
        gqa = c.family != ModelFamily::kDeepseekV3;
        mla = !gqa;
        moe = c.family == ModelFamily::kQwen3Moe ||
              (c.family == ModelFamily::kDeepseekV3 && l >= c.first_k_dense);
        dense = !moe;
        Put(B, m + (gqa ? "self_attention.linear_qkv.layer_norm_weight"
                        : "input_layernorm.weight"),
            ck.P(h + "input_layernorm.weight", {H}));
        Put(B, m + (moe ? "pre_mlp_layernorm.weight" : "mlp.linear_fc1.layer_norm_weight"),
            ck.P(h + "post_attention_layernorm.weight", {H}));
      }
      const std::string at = nem ? "mixer." : "self_attn.";
      const std::string ml = nem ? "mixer." : "mlp.";
      if (gqa) {
        const int64_t groups = nkv / tp, qpg = nq / nkv;
        for (const char* kind : {"weight", "bias"}) {
          if (std::string(kind) == "bias" && !c.attention_bias) continue;
          auto shp = [&](int64_t rows) {
            return std::string(kind) == "bias" ? std::vector<int64_t>{rows}
                                               : std::vector<int64_t>{rows, H};
          };
          Piece q = ck.P(h + at + "q_proj." + kind, shp(nq * hd));
          Piece kk = ck.P(h + at + "k_proj." + kind, shp(nkv * hd));
          Piece vv = ck.P(h + at + "v_proj." + kind, shp(nkv * hd));
          std::vector<Piece> parts;
          for (int64_t g = r * groups; g < (r + 1) * groups; ++g) {
            parts.push_back(Rows(q, g * qpg * hd, qpg * hd));
            parts.push_back(Rows(kk, g * hd, hd));
            parts.push_back(Rows(vv, g * hd, hd));
          }
          Piece qkv = CatRows(parts);
          if (qkv.pt) qkv.s = Cat(0, {q.s, kk.s, vv.s});  // one scale per weight
          Put(B, m + "self_attention.linear_qkv." + kind, qkv);
        }
        if (c.qk_norm) {
          Put(B, m + "self_attention.q_layernorm.weight", ck.P(h + at + "q_norm.weight", {hd}));
          Put(B, m + "self_attention.k_layernorm.weight", ck.P(h + at + "k_norm.weight", {hd}));
        }
        Put(B, m + "self_attention.linear_proj.weight",
            ColsOf(ck.P(h + at + "o_proj.weight", {H, nq * hd}), tp, r));
      }
      if ((gqa || mla) && c.kv_cache_scales) {
        for (const char* sc : {"k_scale", "v_scale", "q_scale"}) {
          Put(B, m + "self_attention." + sc, ck.P(h + at + sc, {}));
        }
      }
      if (mla) {
        const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
        const int64_t kva = c.kv_lora_rank + c.qk_rope_head_dim;
        const std::string sa = m + "self_attention.";
        if (c.q_lora_rank > 0) {
          Put(B, sa + "linear_q_down_proj.weight",
              ck.P(h + "self_attn.q_a_proj.weight", {c.q_lora_rank, H}));
          Put(B, sa + "linear_q_up_proj.layer_norm_weight",
              ck.P(h + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}));
          Put(B, sa + "linear_q_up_proj.weight",
              RowsOf(ck.P(h + "self_attn.q_b_proj.weight", {nq * qk, c.q_lora_rank}), tp, r));
        } else {
          Put(B, sa + "linear_q_proj.weight",
              RowsOf(ck.P(h + "self_attn.q_proj.weight", {nq * qk, H}), tp, r));
        }
        Put(B, sa + "linear_kv_down_proj.weight",
            ck.P(h + "self_attn.kv_a_proj_with_mqa.weight", {kva, H}));
        Put(B, sa + "linear_kv_up_proj.layer_norm_weight",
            ck.P(h + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}));
        Put(B, sa + "linear_kv_up_proj.weight",
            RowsOf(ck.P(h + "self_attn.kv_b_proj.weight",
                        {nq * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}),
                   tp, r));
        Put(B, sa + "linear_proj.weight",
            ColsOf(ck.P(h + "self_attn.o_proj.weight", {H, nq * c.v_head_dim}), tp, r));
      }
      if (mamba) {
        const int64_t mi = c.mamba_num_heads * c.mamba_head_dim;
        const int64_t gn = c.n_groups * c.ssm_state_size, nh = c.mamba_num_heads;
        const int64_t conv = mi + 2 * gn;
        Piece in = ck.P(h + "mixer.in_proj.weight", {2 * mi + 2 * gn + nh, H});
        Put(B, m + "mixer.in_proj.weight",
            CatRows({RowsOf(Rows(in, 0, mi), tp, r), RowsOf(Rows(in, mi, mi), tp, r),
                     RowsOf(Rows(in, 2 * mi, gn), tp, r),
                     RowsOf(Rows(in, 2 * mi + gn, gn), tp, r),
                     RowsOf(Rows(in, 2 * mi + 2 * gn, nh), tp, r)}));
        auto conv_rows = [&](const Arr& a) {
          auto part = [&](int64_t b, int64_t n) {
            return Slice(a, 0, b + r * n / tp, n / tp);
          };
          return Cat(0, {part(0, mi), part(mi, gn), part(mi + gn, gn)});
        };
        Put(B, m + "mixer.conv1d.weight",
            Piece{conv_rows(ck.P(h + "mixer.conv1d.weight", {conv, 1, c.conv_kernel}).w)});
        Put(B, m + "mixer.conv1d.bias",
            Piece{conv_rows(ck.P(h + "mixer.conv1d.bias", {conv}).w)});
        Put(B, m + "mixer.A_log", RowsOf(ck.P(h + "mixer.A_log", {nh}), tp, r));
        Put(B, m + "mixer.D", RowsOf(ck.P(h + "mixer.D", {nh}), tp, r));
        Put(B, m + "mixer.dt_bias", RowsOf(ck.P(h + "mixer.dt_bias", {nh}), tp, r));
        Put(B, m + "mixer.norm.weight", RowsOf(ck.P(h + "mixer.norm.weight", {mi}), tp, r));
        Put(B, m + "mixer.out_proj.weight",
            ColsOf(ck.P(h + "mixer.out_proj.weight", {H, mi}), tp, r));
      }
      if (dense) {
        const int64_t I = c.intermediate_size;
        Put(B, m + "mlp.linear_fc1.weight",
            CatRows({RowsOf(ck.P(h + "mlp.gate_proj.weight", {I, H}), tp, r),
                     RowsOf(ck.P(h + "mlp.up_proj.weight", {I, H}), tp, r)}));
        Put(B, m + "mlp.linear_fc2.weight",
            ColsOf(ck.P(h + "mlp.down_proj.weight", {H, I}), tp, r));
      }
      if (nongated) {
        const int64_t I = c.intermediate_size;
        Put(B, m + "mlp.linear_fc1.weight",
            RowsOf(ck.P(h + "mixer.up_proj.weight", {I, H}), tp, r));
        Put(B, m + "mlp.linear_fc2.weight",
            ColsOf(ck.P(h + "mixer.down_proj.weight", {H, I}), tp, r));
      }
      if (moe) {
        const int64_t im = c.moe_intermediate_size;
        const bool gated = !nem;
        Put(B, m + "mlp.router.weight", ck.P(h + ml + "gate.weight", {E, H}));
        if (c.router_bias) {
          Put(B, m + "mlp.router.expert_bias",
              ck.P(h + ml + "gate.e_score_correction_bias", {E}));
        }
        Piece up = ck.P(h + ml + "experts.{}.up_proj.weight", {E, im, H});
        Piece down = ck.P(h + ml + "experts.{}.down_proj.weight", {E, H, im});
        Piece gate;
        if (gated) gate = ck.P(h + ml + "experts.{}.gate_proj.weight", {E, im, H});
        const int64_t el = E / o.ep;
        std::vector<Piece> fc1, fc2;
        for (int64_t j = 0; j < el; ++j) {
          const int64_t e = epr * el + j;
          Piece u = RowsOf(MemberP(up, e), o.etp, er);
          fc1.push_back(gated ? Glu(RowsOf(MemberP(gate, e), o.etp, er), u, o.chunk) : u);
          fc2.push_back(ColsOf(MemberP(down, e), o.etp, er));
        }
        if (o.grouped) {
          Put(B, m + "mlp.experts.linear_fc1.weight", StackP(fc1));
          Put(B, m + "mlp.experts.linear_fc2.weight", StackP(fc2));
        } else {
          for (int64_t j = 0; j < el; ++j) {
            Put(B, absl::StrCat(m, "mlp.experts.linear_fc1.weight", j), fc1[j]);
            Put(B, absl::StrCat(m, "mlp.experts.linear_fc2.weight", j), fc2[j]);
          }
        }
        if (c.num_shared_experts > 0) {
          const int64_t is = c.shared_intermediate_size;
          const std::string se = h + ml + "shared_experts.";
          Piece su = RowsOf(ck.P(se + "up_proj.weight", {is, H}), tp, r);
          Put(B, m + "mlp.shared_experts.linear_fc1.weight",
              gated ? CatRows({RowsOf(ck.P(se + "gate_proj.weight", {is, H}), tp, r), su})
                    : su);
          Put(B, m + "mlp.shared_experts.linear_fc2.weight",
              ColsOf(ck.P(se + "down_proj.weight", {H, is}), tp, r));
        }
      }
    }
    if (stage == o.pp - 1) {
      Put(B, nem ? "decoder.final_norm.weight" : "decoder.final_layernorm.weight",
          ck.P(nem ? "backbone.norm_f.weight" : "model.norm.weight", {H}));
      if (!c.tie_word_embeddings) {
        Put(B, "output_layer.weight",
            Vocab(ck.P("lm_head.weight", {c.vocab_size, H}), c.vocab_size, vp, tp, r));
      } else if (o.pp > 1) {
        Put(B, "output_layer.weight", Vocab(embed, c.vocab_size, vp, tp, r));
      }
    }
  }
  return out;
}

std::vector<Bufs> ExpectFsdp(Checkpoint& ck, int64_t dp, int64_t shard) {
  std::vector<Bufs> out(dp);
  for (int64_t k = 0; k < dp; ++k) {
    const int64_t s = k % shard;
    for (const auto& kv : ck.all()) {
      const Arr& a = kv.second;
      ck.P(kv.first, a.shape);  // marks used
      if (a.shape.empty()) {
        out[k][kv.first] = a;
        continue;
      }
      const bool stacked = kv.first.find("{}") != std::string::npos;
      auto chunk = [&](const Arr& x) {
        const int64_t n = x.shape[0], c = CeilDiv(n, shard);
        const int64_t b = std::min(n, s * c), size = std::min(c, n - b);
        return Slice(x, 0, b, size);
      };
      if (!stacked) {
        Arr c = chunk(a);
        if (c.shape[0] > 0) out[k][kv.first] = c;
        continue;
      }
      for (int64_t e = 0; e < a.shape[0]; ++e) {
        std::string name = kv.first;
        name.replace(name.find("{}"), 2, absl::StrCat(e));
        if (a.shape.size() == 1) {  // per-expert scalars: replicated
          out[k][name] = Member(a, e);
          continue;
        }
        Arr c = chunk(Member(a, e));
        if (c.shape[0] > 0) out[k][name] = c;
      }
    }
  }
  return out;
}

TrainerExpect Megatron(MegatronOpts o) {
  return [o](const ModelConfig& c, Checkpoint& ck) { return ExpectMegatron(c, ck, o); };
}
TrainerExpect Fsdp(int64_t dp, int64_t shard) {
  return [dp, shard](const ModelConfig&, Checkpoint& ck) { return ExpectFsdp(ck, dp, shard); };
}

}  // namespace refit::testing
