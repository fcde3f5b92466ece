// vLLM's and SGLang's local buffers per rank, stated independently of
// mapping/'s tables (conventions_reference.h).
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
using testing_mapping::Slice;

std::vector<Bufs> ExpectVllm(const ModelConfig& c, Checkpoint& ck, int64_t tp,
                             int64_t dp, bool ep, bool sglang, int64_t sglang_ep,
                             bool round_robin) {
  const int64_t world = tp * dp, H = c.hidden_size, hd = c.head_dim;
  const int64_t nq = c.num_heads, nkv = c.num_kv_heads, E = c.num_experts;
  const bool nem = c.family == ModelFamily::kNemotronH;
  const std::string hl = nem ? "backbone.layers." : "model.layers.";
  std::vector<Bufs> out(world);
  const int64_t vp = Up(c.vocab_size, 64);
  for (int64_t k = 0; k < world; ++k) {
    const int64_t r = k % tp;
    Bufs& B = out[k];
    Put(B, "model.embed_tokens.weight",
        Vocab(ck.P(nem ? "backbone.embeddings.weight" : "model.embed_tokens.weight",
                   {c.vocab_size, H}),
              c.vocab_size, vp, tp, r));
    // Experts held and their intermediate slice.
    int64_t e0 = 0, ne = E, it = tp, ir = r, estride = 1;
    if (sglang_ep > 0) {
      const int64_t moe_tp = tp / sglang_ep;
      ne = E / sglang_ep;
      e0 = (r / moe_tp) * ne;
      it = moe_tp;
      ir = r % moe_tp;
    } else if (ep) {
      const int64_t base = E / world, rem = E % world;
      e0 = k * base + std::min(k, rem);
      ne = base + (k < rem);
      if (round_robin) {  // vLLM --expert-placement-strategy round_robin
        e0 = k;
        estride = world;
      }
      it = 1;
      ir = 0;
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string h = absl::StrCat(hl, l, ".");
      const std::string v = absl::StrCat("model.layers.", l, ".");
      bool gqa = false, mla = false, mamba = false, dense = false,
           nongated = false, moe = false;
      if (nem) {
        HybridBlock blk = c.hybrid_pattern[l];
        gqa = blk == HybridBlock::kAttention;
        mamba = blk == HybridBlock::kMamba;
        nongated = blk == HybridBlock::kMlp;
        moe = blk == HybridBlock::kMoe;
        Put(B, v + "norm.weight", ck.P(h + "norm.weight", {H}));
      } else {
        gqa = c.family != ModelFamily::kDeepseekV3;
        mla = !gqa;
        moe = c.family == ModelFamily::kQwen3Moe ||
              (c.family == ModelFamily::kDeepseekV3 && l >= c.first_k_dense);
        dense = !moe;
        Put(B, v + "input_layernorm.weight", ck.P(h + "input_layernorm.weight", {H}));
        Put(B, v + "post_attention_layernorm.weight",
            ck.P(h + "post_attention_layernorm.weight", {H}));
      }
      const std::string at = nem ? "mixer." : "self_attn.";
      const std::string ml = nem ? "mixer." : "mlp.";
      if (gqa) {
        const int64_t ql = nq / tp;
        const int64_t kvl = tp >= nkv ? 1 : nkv / tp;
        const int64_t kvh = tp >= nkv ? r / (tp / nkv) : r * kvl;
        for (const char* kind : {"weight", "bias"}) {
          if (std::string(kind) == "bias" && !c.attention_bias) continue;
          auto shp = [&](int64_t rows) {
            return std::string(kind) == "bias" ? std::vector<int64_t>{rows}
                                               : std::vector<int64_t>{rows, H};
          };
          Put(B, v + at + "qkv_proj." + kind,
              CatRows({Rows(ck.P(h + at + "q_proj." + kind, shp(nq * hd)), r * ql * hd, ql * hd),
                       Rows(ck.P(h + at + "k_proj." + kind, shp(nkv * hd)), kvh * hd, kvl * hd),
                       Rows(ck.P(h + at + "v_proj." + kind, shp(nkv * hd)), kvh * hd, kvl * hd)}));
        }
        if (c.qk_norm) {
          Put(B, v + at + "q_norm.weight", ck.P(h + at + "q_norm.weight", {hd}));
          Put(B, v + at + "k_norm.weight", ck.P(h + at + "k_norm.weight", {hd}));
        }
        Put(B, v + at + "o_proj.weight",
            ColsOf(ck.P(h + at + "o_proj.weight", {H, nq * hd}), tp, r));
      }
      if ((gqa || mla) && c.kv_cache_scales) {
        for (const char* sc : {"k_scale", "v_scale", "q_scale"}) {
          Put(B, v + at + "attn." + sc, ck.P(h + at + sc, {}));
        }
      }
      if (mla) {
        const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
        const int64_t kva = c.kv_lora_rank + c.qk_rope_head_dim;
        if (c.q_lora_rank > 0) {
          Put(B, v + (sglang ? "self_attn.fused_qkv_a_proj_with_mqa.weight"
                             : "self_attn.fused_qkv_a_proj.weight"),
              CatRows({ck.P(h + "self_attn.q_a_proj.weight", {c.q_lora_rank, H}),
                       ck.P(h + "self_attn.kv_a_proj_with_mqa.weight", {kva, H})}));
          Put(B, v + "self_attn.q_a_layernorm.weight",
              ck.P(h + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}));
          Put(B, v + "self_attn.q_b_proj.weight",
              RowsOf(ck.P(h + "self_attn.q_b_proj.weight", {nq * qk, c.q_lora_rank}), tp, r));
        } else {  // no q LoRA: q_proj column-parallel, kv_a alone, replicated
          Put(B, v + "self_attn.q_proj.weight",
              RowsOf(ck.P(h + "self_attn.q_proj.weight", {nq * qk, H}), tp, r));
          Put(B, v + "self_attn.kv_a_proj_with_mqa.weight",
              ck.P(h + "self_attn.kv_a_proj_with_mqa.weight", {kva, H}));
        }
        Put(B, v + "self_attn.kv_a_layernorm.weight",
            ck.P(h + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}));
        Put(B, v + "self_attn.kv_b_proj.weight",
            RowsOf(ck.P(h + "self_attn.kv_b_proj.weight",
                        {nq * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}),
                   tp, r));
        Put(B, v + "self_attn.o_proj.weight",
            ColsOf(ck.P(h + "self_attn.o_proj.weight", {H, nq * c.v_head_dim}), tp, r));
      }
      if (mamba) {
        const int64_t mi = c.mamba_num_heads * c.mamba_head_dim;
        const int64_t gn = c.n_groups * c.ssm_state_size, nh = c.mamba_num_heads;
        const int64_t conv = mi + 2 * gn;
        // One group (n_groups == 1): B and C whole on every rank.
        const int64_t gtp = c.n_groups == 1 ? 1 : tp, gr = c.n_groups == 1 ? 0 : r;
        Piece in = ck.P(h + "mixer.in_proj.weight", {2 * mi + 2 * gn + nh, H});
        Put(B, v + "mixer.in_proj.weight",
            CatRows({RowsOf(Rows(in, 0, mi), tp, r), RowsOf(Rows(in, mi, mi), tp, r),
                     RowsOf(Rows(in, 2 * mi, gn), gtp, gr),
                     RowsOf(Rows(in, 2 * mi + gn, gn), gtp, gr),
                     RowsOf(Rows(in, 2 * mi + 2 * gn, nh), tp, r)}));
        Piece cw = ck.P(h + "mixer.conv1d.weight", {conv, 1, c.conv_kernel});
        auto conv_rows = [&](const Arr& a) {
          auto part = [&](int64_t b, int64_t n) {
            if (b > 0 && c.n_groups == 1) return Slice(a, 0, b, n);
            return Slice(a, 0, b + r * n / tp, n / tp);
          };
          return Cat(0, {part(0, mi), part(mi, gn), part(mi + gn, gn)});
        };
        Put(B, v + "mixer.conv1d.weight", Piece{conv_rows(cw.w)});
        Put(B, v + "mixer.conv1d.bias",
            Piece{conv_rows(ck.P(h + "mixer.conv1d.bias", {conv}).w)});
        Put(B, v + "mixer.A", NegExpF32(RowsOf(ck.P(h + "mixer.A_log", {nh}), tp, r)));
        Put(B, v + "mixer.D", RowsOf(ck.P(h + "mixer.D", {nh}), tp, r));
        Put(B, v + "mixer.dt_bias", RowsOf(ck.P(h + "mixer.dt_bias", {nh}), tp, r));
        Put(B, v + "mixer.norm.weight", RowsOf(ck.P(h + "mixer.norm.weight", {mi}), tp, r));
        Put(B, v + "mixer.out_proj.weight",
            ColsOf(ck.P(h + "mixer.out_proj.weight", {H, mi}), tp, r));
      }
      if (dense) {
        const int64_t I = c.intermediate_size;
        Put(B, v + "mlp.gate_up_proj.weight",
            CatRows({RowsOf(ck.P(h + "mlp.gate_proj.weight", {I, H}), tp, r),
                     RowsOf(ck.P(h + "mlp.up_proj.weight", {I, H}), tp, r)}));
        Put(B, v + "mlp.down_proj.weight",
            ColsOf(ck.P(h + "mlp.down_proj.weight", {H, I}), tp, r));
      }
      if (nongated) {
        const int64_t I = c.intermediate_size;
        Put(B, v + "mixer.up_proj.weight", RowsOf(ck.P(h + "mixer.up_proj.weight", {I, H}), tp, r));
        Put(B, v + "mixer.down_proj.weight",
            ColsOf(ck.P(h + "mixer.down_proj.weight", {H, I}), tp, r));
      }
      if (moe) {
        const int64_t im = c.moe_intermediate_size;
        const bool gated = !nem;
        Put(B, v + ml + "gate.weight", ck.P(h + ml + "gate.weight", {E, H}));
        if (c.router_bias) {
          Put(B, v + ml + "gate.e_score_correction_bias",
              ck.P(h + ml + "gate.e_score_correction_bias", {E}));
        }
        Piece up = ck.P(h + ml + "experts.{}.up_proj.weight", {E, im, H});
        Piece down = ck.P(h + ml + "experts.{}.down_proj.weight", {E, H, im});
        Piece gate;
        if (gated) gate = ck.P(h + ml + "experts.{}.gate_proj.weight", {E, im, H});
        std::vector<Piece> w13, w2;
        for (int64_t j = 0; j < ne; ++j) {
          const int64_t e = e0 + j * estride;
          Piece u = RowsOf(MemberP(up, e), it, ir);
          w13.push_back(gated ? CatRows({RowsOf(MemberP(gate, e), it, ir), u}) : u);
          w2.push_back(ColsOf(MemberP(down, e), it, ir));
        }
        if (ne > 0) {
          Put(B, v + ml + "experts.w13_weight", StackP(w13));
          Put(B, v + ml + "experts.w2_weight", StackP(w2));
        }
        if (c.num_shared_experts > 0) {
          const int64_t is = c.shared_intermediate_size;
          const std::string se = h + ml + "shared_experts.";
          Piece su = RowsOf(ck.P(se + "up_proj.weight", {is, H}), tp, r);
          if (gated) {
            Put(B, v + ml + "shared_experts.gate_up_proj.weight",
                CatRows({RowsOf(ck.P(se + "gate_proj.weight", {is, H}), tp, r), su}));
          } else {
            Put(B, v + ml + "shared_experts.up_proj.weight", su);
          }
          Put(B, v + ml + "shared_experts.down_proj.weight",
              ColsOf(ck.P(se + "down_proj.weight", {H, is}), tp, r));
        }
      }
    }
    Put(B, nem ? "model.norm_f.weight" : "model.norm.weight",
        ck.P(nem ? "backbone.norm_f.weight" : "model.norm.weight", {H}));
    if (!c.tie_word_embeddings) {
      Put(B, "lm_head.weight",
          Vocab(ck.P("lm_head.weight", {c.vocab_size, H}), c.vocab_size, vp, tp, r));
    }
  }
  return out;
}

}  // namespace refit::testing
