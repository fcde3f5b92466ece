// End-to-end tests of the conventions: for tiny models of every family,
// each trainer layout and each engine layout, the expected local buffers of
// both sides are written HERE by explicit slicing and concatenation of the
// full checkpoint tensors (an independent statement of each convention, not
// a call into the tables). Then: every rank's expected buffers must pass
// ValidateRankBuffers against the layout, every record must address the
// right bytes of those buffers, and the planner's plan (BuildPlan, performed
// by ReferenceCopy) from the trainer buffers must reproduce every engine
// buffer byte for byte (padding zero).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/scatter.h"
#include "mapping/testing/arrays.h"
#include "mapping/validate.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using testing_mapping::Arr;
using testing_mapping::Bufs;
using testing_mapping::Cat;
using testing_mapping::Ckpt;
using testing_mapping::Member;
using testing_mapping::PadRows;
using testing_mapping::Slice;
using testing_mapping::Stack;

constexpr int64_t kBlock = 128;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t Up(int64_t v, int64_t m) { return CeilDiv(v, m) * m; }

// A weight and, for an FP8 weight, its block scales, sliced together: rows /
// cols [b, b+n) of the weight take scale rows / cols [b/128, ceil((b+n)/128)).
// Per-tensor FP8 (pt): s is the weight's one scale, as [1] ([E, 1] for a
// stacked tensor), untouched by slicing and concatenated by fusion.
struct Piece {
  Arr w;
  bool fp8 = false;
  Arr s;
  bool pt = false;
};

class Checkpoint {
 public:
  explicit Checkpoint(Ckpt ck) : ck_(std::move(ck)) {}

  // The tensor `name`, which must have `shape` (checks the model family).
  Piece P(const std::string& name, std::vector<int64_t> shape) {
    auto it = ck_.find(name);
    if (it == ck_.end()) {
      ADD_FAILURE() << "checkpoint has no tensor " << name;
      return {testing_mapping::Zeros(shape, DType::kBF16)};
    }
    used_.insert(name);
    EXPECT_EQ(it->second.shape, shape) << name;
    Piece p{it->second};
    std::string sname = name;
    size_t pos = sname.rfind("weight");
    if (pos != std::string::npos) {
      sname.insert(pos + 6, "_scale_inv");
      auto s = ck_.find(sname);
      if (s != ck_.end()) {
        used_.insert(sname);
        p.fp8 = true;
        p.s = s->second;
      }
      std::string pname = name;
      pname.insert(pos + 6, "_scale");
      auto ps = ck_.find(pname);
      if (ps != ck_.end()) {
        used_.insert(pname);
        p.pt = true;
        p.s = ps->second;
        p.s.shape.push_back(1);  // [] -> [1], [E] -> [E, 1]
      }
    }
    return p;
  }
  // Names of checkpoint tensors no expectation used.
  std::vector<std::string> Unused() const {
    std::vector<std::string> out;
    for (const auto& kv : ck_) {
      if (!used_.count(kv.first)) out.push_back(kv.first);
    }
    return out;
  }
  const Ckpt& all() const { return ck_; }

 private:
  Ckpt ck_;
  std::set<std::string> used_;
};

// Slices dim `d` counted from the end (1 = last, 2 = second to last).
Piece SliceEnd(const Piece& p, int from_end, int64_t b, int64_t n) {
  Piece out;
  const int d = static_cast<int>(p.w.shape.size()) - from_end;
  out.w = Slice(p.w, d, b, n);
  out.fp8 = p.fp8;
  out.pt = p.pt;
  if (p.pt) out.s = p.s;
  if (p.fp8) {
    out.s = Slice(p.s, d, b / kBlock, CeilDiv(b + n, kBlock) - b / kBlock);
  }
  return out;
}
// Rows of a matrix (or of a stacked matrix's members), or of a vector.
Piece Rows(const Piece& p, int64_t b, int64_t n) {
  return SliceEnd(p, p.w.shape.size() >= 2 ? 2 : 1, b, n);
}
Piece Cols(const Piece& p, int64_t b, int64_t n) { return SliceEnd(p, 1, b, n); }
// vLLM's A: the f32 parameter its loader fills with -exp(A_log.float()).
Piece NegExpF32(const Piece& p) {
  Piece out;
  out.w.shape = p.w.shape;
  out.w.dtype = DType::kF32;
  const int64_t n = static_cast<int64_t>(p.w.bytes.size()) / 2;
  out.w.bytes.resize(n * 4);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(p.w.bytes[2 * i]) |
                    static_cast<uint32_t>(p.w.bytes[2 * i + 1]) << 8;
    bits <<= 16;
    float x;
    std::memcpy(&x, &bits, 4);
    const float v = static_cast<float>(-std::exp(static_cast<double>(x)));
    std::memcpy(out.w.bytes.data() + 4 * i, &v, 4);
  }
  return out;
}

Piece RowsOf(const Piece& p, int64_t parts, int64_t i) {
  const int64_t n = p.w.shape[p.w.shape.size() >= 2 ? p.w.shape.size() - 2 : 0] / parts;
  return Rows(p, i * n, n);
}
Piece ColsOf(const Piece& p, int64_t parts, int64_t i) {
  const int64_t n = p.w.shape.back() / parts;
  return Cols(p, i * n, n);
}
// Concatenation of rows (scales concatenated too, as vLLM's merged params).
Piece CatRows(const std::vector<Piece>& ps) {
  Piece out;
  std::vector<Arr> w, s;
  for (const Piece& p : ps) {
    w.push_back(p.w);
    if (p.fp8 || p.pt) s.push_back(p.s);
  }
  const int d = static_cast<int>(ps[0].w.shape.size()) >= 2
                    ? static_cast<int>(ps[0].w.shape.size()) - 2
                    : 0;
  out.w = Cat(d, w);
  out.fp8 = ps[0].fp8;
  out.pt = ps[0].pt;
  if (out.fp8) out.s = Cat(d, s);
  if (out.pt) out.s = Cat(static_cast<int>(s[0].shape.size()) - 1, s);
  return out;
}
Piece StackP(const std::vector<Piece>& ps) {
  Piece out;
  std::vector<Arr> w, s;
  for (const Piece& p : ps) {
    w.push_back(p.w);
    if (p.fp8 || p.pt) s.push_back(p.s);
  }
  out.w = Stack(w);
  out.fp8 = ps[0].fp8;
  out.pt = ps[0].pt;
  if (out.fp8 || out.pt) out.s = Stack(s);
  return out;
}
Piece MemberP(const Piece& p, int64_t e) {
  Piece out{Member(p.w, e), p.fp8};
  out.pt = p.pt;
  if (p.fp8 || p.pt) out.s = Member(p.s, e);
  return out;
}
Piece Vocab(const Piece& p, int64_t vocab, int64_t padded, int64_t tp,
            int64_t r) {
  Piece q{PadRows(p.w, padded - vocab)};
  return Rows(q, r * padded / tp, padded / tp);
}

void Put(Bufs& b, const std::string& name, const Piece& p) {
  EXPECT_EQ(b.count(name), 0u) << "expectation puts " << name << " twice";
  b[name] = p.w;
  if (p.fp8) {
    std::string s = name;
    s.insert(s.rfind("weight") + 6, "_scale_inv");
    b[s] = p.s;
  }
  if (p.pt) {
    std::string s = name;
    s.insert(s.rfind("weight") + 6, "_scale");
    Arr a = p.s;
    // Grouped experts with one scale each: [E_local] rather than [E_local, 1].
    if (a.shape.size() == 2 && a.shape[1] == 1) a.shape.pop_back();
    b[s] = a;
  }
}

// ---------------------------------------------------------------------------
// vLLM, stated independently.
// SGLang (sglang = true): MLA's fused module is fused_qkv_a_proj_with_mqa;
// with sglang_ep > 0, each TP group spreads the experts over sglang_ep ranks
// and shards each over tp / sglang_ep of them.
std::vector<Bufs> ExpectVllm(const ModelConfig& c, Checkpoint& ck, int64_t tp,
                             int64_t dp, bool ep, bool sglang = false,
                             int64_t sglang_ep = 0, bool round_robin = false) {
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

// ---------------------------------------------------------------------------
// Megatron-Core, stated independently.
struct MegatronOpts {
  int64_t tp = 1, pp = 1, dp = 1, ep = 1, etp = 1, first = 0, last = 0;
  bool grouped = false;
  int64_t chunk = 0;
};

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

// ---------------------------------------------------------------------------
// HF / FSDP (HSDP), stated independently: every tensor Shard(0) by
// torch.chunk over the shard group; experts per member.
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

// ---------------------------------------------------------------------------

std::vector<LocalBuffer> AsLocal(const Bufs& b) {
  std::vector<LocalBuffer> out;
  for (const auto& kv : b) {
    out.push_back({kv.first, kv.second.shape, kv.second.dtype,
                   static_cast<int64_t>(kv.second.bytes.size())});
  }
  return out;
}

// Memory of a side in layout buffer order, from per-rank expected buffers.
std::vector<std::vector<uint8_t>> Memory(const MappedSide& side,
                                         const std::vector<Bufs>& bufs) {
  std::vector<std::vector<uint8_t>> mem;
  for (const BufferSpec& b : side.layout.buffers) {
    mem.push_back(bufs[b.rank].at(b.name).bytes);
  }
  return mem;
}

using TrainerExpect = std::function<std::vector<Bufs>(const ModelConfig&, Checkpoint&)>;

void RunCase(const std::string& model, const std::string& trainer,
             const TrainerExpect& expect_trainer, const std::string& engine,
             int64_t tp, int64_t dp, bool ep) {
  SCOPED_TRACE(absl::StrCat(model, " ", trainer, " -> ", engine));
  absl::StatusOr<ModelConfig> c =
      model[0] == '{' ? ParseModelConfig(model) : LoadModelConfig(model);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(trainer);
  ASSERT_TRUE(ts.ok()) << ts.status();
  absl::StatusOr<EngineSpec> es = ParseEngineSpec(engine);
  ASSERT_TRUE(es.ok()) << es.status();
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*c, *ts);
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*c, *es);
  ASSERT_TRUE(dst.ok()) << dst.status();
  // The same logical tensors on both sides; only engine tensors may carry
  // a transform, and only Mamba's A_log does, as the f32 parameter vLLM and
  // SGLang create (they keep -exp(A_log)).
  int transformed = 0;
  {
    std::vector<TensorSpec> plain = dst->layout.tensors;
    for (TensorSpec& t : plain) {
      if (t.transform != Transform::kNone) {
        ++transformed;
        EXPECT_TRUE(absl::EndsWith(t.name, "mixer.A_log")) << t.name;
        EXPECT_EQ(t.transform, Transform::kNegExp) << t.name;
        EXPECT_EQ(t.dtype, DType::kF32) << t.name;
        t.dtype = DType::kBF16;
      }
      t.transform = Transform::kNone;
    }
    ASSERT_EQ(src->layout.tensors, plain);
  }
  if (absl::StrContains(model, "nemotron")) {
    EXPECT_GT(transformed, 0) << "NemotronH's A_log must be transformed";
  }

  Checkpoint ck(testing_mapping::FillCheckpoint(src->layout.tensors, 42));
  std::vector<Bufs> tb = expect_trainer(*c, ck);
  const bool sglang = es->kind == EngineSpec::Kind::kSglang;
  std::vector<Bufs> eb =
      ExpectVllm(*c, ck, tp, dp, ep, sglang, sglang ? es->ep : 0, es->round_robin);
  EXPECT_THAT(ck.Unused(), ::testing::IsEmpty())
      << "tensors of the model family that no convention statement expects";
  ASSERT_EQ(static_cast<int64_t>(tb.size()), src->layout.world_size);
  ASSERT_EQ(static_cast<int64_t>(eb.size()), dst->layout.world_size);
  for (int32_t r = 0; r < src->layout.world_size; ++r) {
    absl::Status s = ValidateRankBuffers(*src, r, AsLocal(tb[r]));
    ASSERT_TRUE(s.ok()) << "trainer " << s;
  }
  for (int32_t r = 0; r < dst->layout.world_size; ++r) {
    absl::Status s = ValidateRankBuffers(*dst, r, AsLocal(eb[r]));
    ASSERT_TRUE(s.ok()) << "engine " << s;
  }
  for (const Record& r : src->layout.records) {
    ASSERT_TRUE(ValidateRecord(src->layout, r).ok()) << ValidateRecord(src->layout, r);
  }
  for (const Record& r : dst->layout.records) {
    ASSERT_TRUE(ValidateRecord(dst->layout, r).ok()) << ValidateRecord(dst->layout, r);
  }
  std::vector<std::vector<uint8_t>> src_mem = Memory(*src, tb);
  absl::Status s = testing_mapping::CheckRecords(src->layout, src_mem, ck.all());
  ASSERT_TRUE(s.ok()) << "trainer " << s;
  std::vector<std::vector<uint8_t>> expected = Memory(*dst, eb);
  // What the engine holds: the checkpoint, with A = -exp(A_log) in f32.
  auto engine_ck = ck.all();
  for (const TensorSpec& t : dst->layout.tensors) {
    if (t.transform == Transform::kNegExp) {
      engine_ck[t.name] = NegExpF32(Piece{engine_ck.at(t.name)}).w;
    }
  }
  s = testing_mapping::CheckRecords(dst->layout, expected, engine_ck);
  ASSERT_TRUE(s.ok()) << "engine " << s;

  // ScatterToRecord builds the same trainer buffers from the checkpoint
  // (stacked tensors member by member); GatherFromRecord reads every
  // engine tensor back whole.
  {
    std::vector<std::vector<uint8_t>> built;
    for (const BufferSpec& b : src->layout.buffers) built.emplace_back(b.byte_size, 0);
    for (const Record& r : src->layout.records) {
      const TensorSpec& t = src->layout.tensors[r.tensor];
      const Arr& full = ck.all().at(t.name);
      if (t.stacked) {
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          Arr m = Member(full, e);
          ASSERT_TRUE(ScatterToRecord(src->layout, r, e, m.bytes,
                                      absl::MakeSpan(built[r.buffer])).ok());
        }
      } else {
        ASSERT_TRUE(ScatterToRecord(src->layout, r, -1, full.bytes,
                                    absl::MakeSpan(built[r.buffer])).ok());
      }
    }
    for (size_t b = 0; b < built.size(); ++b) {
      EXPECT_TRUE(built[b] == src_mem[b])
          << "scattered trainer buffer " << src->layout.buffers[b].name
          << " on rank " << src->layout.buffers[b].rank;
    }
    std::map<std::string, std::vector<uint8_t>> back;
    for (const Record& r : dst->layout.records) {
      const TensorSpec& t = dst->layout.tensors[r.tensor];
      auto& full = back[t.name];
      if (full.empty()) full.assign(engine_ck.at(t.name).bytes.size(), 0);
      ASSERT_TRUE(GatherFromRecord(dst->layout, r, -1, expected[r.buffer],
                                   absl::MakeSpan(full)).ok());
    }
    for (const auto& kv : engine_ck) {
      EXPECT_TRUE(back[kv.first] == kv.second.bytes) << "gathered " << kv.first;
    }
  }

  // Engine memory starts as a marker: padding (vocab rows) must stay
  // untouched by the copy, everything else must be overwritten.
  constexpr uint8_t kMarker = 0xA5;
  std::vector<std::vector<uint8_t>> dst_mem;
  for (const BufferSpec& b : dst->layout.buffers) {
    dst_mem.emplace_back(b.byte_size, kMarker);
  }
  // The real planner moves the bytes: BuildPlan, then ReferenceCopy
  // performs its segments (the expectation above stays independent).
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  HostBuffers src_ptrs, dst_ptrs;
  for (auto& m : src_mem) src_ptrs.push_back(m.data());
  for (auto& m : dst_mem) dst_ptrs.push_back(m.data());
  s = ReferenceCopy(*plan, src_ptrs, dst_ptrs);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t b = 0; b < dst_mem.size(); ++b) {
    for (const ByteRange& p : dst->layout.buffers[b].padding) {
      for (int64_t i = p.begin; i < p.end(); ++i) {
        ASSERT_EQ(dst_mem[b][i], kMarker)
            << "padding byte " << i << " of engine buffer "
            << dst->layout.buffers[b].name << " on rank "
            << dst->layout.buffers[b].rank << " was written";
        dst_mem[b][i] = 0;  // the expectation has zero padding
      }
    }
  }
  // Everything is byte for byte the expectation (A as -exp in f32).
  for (size_t b = 0; b < dst_mem.size(); ++b) {
    EXPECT_TRUE(dst_mem[b] == expected[b])
        << "engine rank " << dst->layout.buffers[b].rank << " buffer "
        << dst->layout.buffers[b].name << " differs after the copy";
  }
}

TrainerExpect Megatron(MegatronOpts o) {
  return [o](const ModelConfig& c, Checkpoint& ck) { return ExpectMegatron(c, ck, o); };
}
TrainerExpect Fsdp(int64_t dp, int64_t shard) {
  return [dp, shard](const ModelConfig&, Checkpoint& ck) { return ExpectFsdp(ck, dp, shard); };
}

// --- dense GQA ---------------------------------------------------------------

TEST(ConventionsTest, LlamaMegatronUnevenPipelineToVllmTpAboveKvHeads) {
  // 5 layers over pp=2: 3 + 2; vLLM tp=4 > 2 kv heads: each kv head on 2 ranks.
  RunCase("tiny-llama", "megatron:tp=2,pp=2,dp=1", Megatron({2, 2, 1}),
          "vllm:tp=4", 4, 1, false);
}

TEST(ConventionsTest, LlamaMegatronFirstLastStagesToVllmDp) {
  MegatronOpts o{1, 3, 2};
  o.first = 1;
  o.last = 1;
  // first=1, last=1 leave 3 layers for the one middle stage.
  RunCase("tiny-llama", "megatron:tp=1,pp=3,dp=2,first=1,last=1", Megatron(o),
          "vllm:tp=2,dp=2", 2, 2, false);
}

TEST(ConventionsTest, LlamaFsdpToVllm) {
  RunCase("tiny-llama", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3TiedEmbeddingsQkNormMegatronPipelineToVllm) {
  RunCase("tiny-qwen3", "megatron:tp=2,pp=2,dp=2", Megatron({2, 2, 2}),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3HsdpToVllmTpEqualKvHeads) {
  RunCase("tiny-qwen3", "fsdp:dp=4,shard=2", Fsdp(4, 2), "vllm:tp=2,dp=2", 2, 2,
          false);
}

TEST(ConventionsTest, Qwen2QkvBiasOneKvHeadReplicated) {
  RunCase("tiny-qwen2", "megatron:tp=1,pp=2,dp=2", Megatron({1, 2, 2}),
          "vllm:tp=4", 4, 1, false);
}

// --- Qwen3-MoE ---------------------------------------------------------------

TEST(ConventionsTest, Qwen3MoeIndexedExpertsEpToVllmTpShardedExperts) {
  MegatronOpts o{2, 1, 2};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-qwen3-moe", "megatron:tp=2,dp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3MoeGroupedChunkInterleavedToVllmExpertParallel) {
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  o.grouped = true;
  o.chunk = 2;
  RunCase("tiny-qwen3-moe",
          "megatron:tp=2,dp=2,ep=4,etp=1,experts=grouped,glu_chunk=2",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, Qwen3MoeExpertTensorParallelPipeline) {
  MegatronOpts o{2, 3, 1};
  o.ep = 1;
  o.etp = 2;
  o.chunk = 2;
  RunCase("tiny-qwen3-moe", "megatron:tp=2,pp=3,etp=2,glu_chunk=2", Megatron(o),
          "vllm:tp=1,dp=3,ep=3", 1, 3, true);
}

TEST(ConventionsTest, Qwen3MoeFsdpToVllmEp) {
  RunCase("tiny-qwen3-moe", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2,dp=2,ep=4", 2, 2,
          true);
}

TEST(ConventionsTest, Qwen3MoePerTensorFp8ScalesIndexedChunkedToVllmTp) {
  MegatronOpts o{2, 1, 2};
  o.ep = 2;
  o.etp = 1;
  o.chunk = 4;
  RunCase("tiny-qwen3-moe-fp8", "megatron:tp=2,dp=2,ep=2,etp=1,glu_chunk=4",
          Megatron(o), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, Qwen3MoePerExpertScalesGroupedToVllmEp) {
  MegatronOpts o{2, 3, 1};
  o.ep = 2;
  o.etp = 1;
  o.grouped = true;
  RunCase("tiny-qwen3-moe-fp8", "megatron:tp=2,pp=3,ep=2,etp=1,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, Qwen3MoePerTensorFp8FsdpToVllmEp) {
  RunCase("tiny-qwen3-moe-fp8", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=1,dp=3,ep=3",
          1, 3, true);
}

// --- DeepSeek-V3 -------------------------------------------------------------

TEST(ConventionsTest, DeepseekMlaSharedExpertsEtpToVllmTp) {
  MegatronOpts o{2, 3, 1};
  o.ep = 1;
  o.etp = 2;
  RunCase("tiny-deepseek-v3", "megatron:tp=2,pp=3,ep=1,etp=2", Megatron(o),
          "vllm:tp=4", 4, 1, false);
}

TEST(ConventionsTest, DeepseekEpNotEqualTpGroupedToVllmEp) {
  MegatronOpts o{1, 1, 4};
  o.ep = 2;
  o.etp = 2;
  o.grouped = true;
  RunCase("tiny-deepseek-v3", "megatron:tp=1,dp=4,ep=2,etp=2,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, DeepseekFsdpToVllm) {
  RunCase("tiny-deepseek-v3", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, DeepseekFp8WeightsAndScalesMegatronToVllmTp) {
  MegatronOpts o{2, 2, 1};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-deepseek-v3-fp8", "megatron:tp=2,pp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, DeepseekFp8FsdpToVllmExpertParallel) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=3", Fsdp(3, 3), "vllm:tp=2,dp=2,ep=4",
          2, 2, true);
}

// vLLM --expert-placement-strategy round_robin: engine rank k holds experts
// k, k + ep, ...; with 8 experts over ep = 3 ranks 0 and 1 hold three, rank
// 2 two.
TEST(ConventionsTest, DeepseekRoundRobinExpertsToVllm) {
  MegatronOpts o{1, 1, 4};
  o.ep = 2;
  o.etp = 2;
  o.grouped = true;
  RunCase("tiny-deepseek-v3", "megatron:tp=1,dp=4,ep=2,etp=2,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4,placement=round_robin", 2, 2, true);
  RunCase("tiny-deepseek-v3", "fsdp:dp=2", Fsdp(2, 2),
          "vllm:tp=1,dp=3,ep=3,placement=round_robin", 1, 3, true);
}

TEST(ConventionsTest, DeepseekFp8RoundRobinExpertsWithScales) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=3", Fsdp(3, 3),
          "vllm:tp=2,dp=2,ep=4,placement=round_robin", 2, 2, true);
}

// vLLM ignores round_robin for models without expert groups (it falls back
// to linear), so refit refuses it rather than place experts vLLM does not.
TEST(ConventionsTest, RoundRobinPlacementErrorsNameTheReason) {
  auto q = LoadModelConfig("tiny-qwen3-moe");
  ASSERT_TRUE(q.ok());
  auto es = ParseEngineSpec("vllm:tp=2,dp=2,ep=4,placement=round_robin");
  ASSERT_TRUE(es.ok()) << es.status();
  auto l = BuildEngineLayout(*q, *es);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("n_group = 1"));
  for (const char* bad : {"vllm:tp=2,placement=round_robin",
                          "sglang:tp=2,ep=2,placement=round_robin",
                          "vllm:tp=2,ep=2,placement=striped"}) {
    auto s = ParseEngineSpec(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("placement")) << bad;
  }
  EXPECT_EQ(EngineSpecString(*es), "vllm:tp=2,dp=2,ep=4,placement=round_robin");
}

TEST(ConventionsTest, MlaWithoutQLoraKeepsKvAAlone) {
  const std::string json = R"({"model_type": "deepseek_v3", "hidden_size": 8,
      "num_attention_heads": 4, "intermediate_size": 8, "moe_intermediate_size": 4,
      "n_routed_experts": 4, "first_k_dense_replace": 1, "num_hidden_layers": 2,
      "vocab_size": 50, "q_lora_rank": null, "kv_lora_rank": 4,
      "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2})";
  RunCase(json, "megatron:tp=2,pp=2,etp=1,ep=2", Megatron({2, 2, 1, 2, 1}),
          "vllm:tp=4", 4, 1, false);
  RunCase(json, "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2", 2, 1, false);
}

// --- NemotronH ---------------------------------------------------------------

TEST(ConventionsTest, NemotronHybridNonGatedMoeMegatronToVllmTp) {
  MegatronOpts o{2, 2, 1};
  o.ep = 2;
  o.etp = 1;
  RunCase("tiny-nemotron-h", "megatron:tp=2,pp=2,ep=2,etp=1", Megatron(o),
          "vllm:tp=2", 2, 1, false);
}

TEST(ConventionsTest, NemotronGroupedExpertsToVllmExpertParallel) {
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  o.grouped = true;
  RunCase("tiny-nemotron-h", "megatron:tp=2,dp=2,ep=4,etp=1,experts=grouped",
          Megatron(o), "vllm:tp=2,dp=2,ep=4", 2, 2, true);
}

TEST(ConventionsTest, MambaSingleGroupReplicatedOnVllmRejectedByMegatron) {
  const std::string json = R"({"model_type": "nemotron_h", "hidden_size": 8,
      "num_hidden_layers": 2, "hybrid_override_pattern": "M*",
      "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4,
      "mamba_num_heads": 4, "mamba_head_dim": 2, "ssm_state_size": 4,
      "n_groups": 1, "conv_kernel": 4, "vocab_size": 30})";
  RunCase(json, "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2,dp=2", 2, 2, false);
  auto c = ParseModelConfig(json);
  ASSERT_TRUE(c.ok()) << c.status();
  auto s = BuildTrainerLayout(*c, *ParseTrainerSpec("megatron:tp=2"));
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("n_groups"));
}

TEST(ConventionsTest, NemotronFsdpToVllm) {
  RunCase("tiny-nemotron-h", "fsdp:dp=2", Fsdp(2, 2), "vllm:tp=2,dp=2", 2, 2,
          false);
}

// --- SGLang ------------------------------------------------------------------

TEST(ConventionsTest, SglangDeepseekEpInsideTpGroup) {
  // tp=4, ep=2: experts 0-3 on tp ranks 0-1, 4-7 on 2-3, each split in two.
  MegatronOpts o{2, 1, 2};
  o.ep = 4;
  o.etp = 1;
  RunCase("tiny-deepseek-v3", "megatron:tp=2,dp=2,ep=4,etp=1", Megatron(o),
          "sglang:tp=4,dp=2,ep=2", 4, 2, false);
}

TEST(ConventionsTest, SglangFp8DeepseekTp) {
  RunCase("tiny-deepseek-v3-fp8", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2", 2, 1,
          false);
}

TEST(ConventionsTest, SglangNemotronAndQwenMoeFullEp) {
  RunCase("tiny-nemotron-h", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2,ep=2", 2, 1,
          false);
  RunCase("tiny-qwen3-moe-fp8", "fsdp:dp=2", Fsdp(2, 2), "sglang:tp=2,dp=2,ep=2",
          2, 2, false);
}

// --- randomized ----------------------------------------------------------------

// Random small models and layouts (seeded), each checked like the cases above.
TEST(ConventionsTest, RandomModelsAndLayouts) {
  std::mt19937 rng(20261122);
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  for (int iter = 0; iter < 40; ++iter) {
    const int family = iter % 3;  // dense, qwen3_moe, deepseek_v3
    const int64_t kv = pick({1, 2, 4});
    const int64_t heads = kv * pick({1, 2});
    const int64_t hd = pick({2, 4});
    const int64_t hidden = pick({8, 12, 16});
    const int64_t layers = pick({1, 2, 3, 4, 5});
    const int64_t vocab = pick({37, 64, 100, 130});
    const int64_t inter = pick({8, 16, 24});
    const int64_t experts = pick({4, 8});
    const bool tied = rng() % 2;
    std::string json;
    if (family == 0) {
      json = absl::StrCat(R"({"model_type": "qwen3", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "num_key_value_heads": )", kv, R"(, "head_dim": )", hd,
                          R"(, "intermediate_size": )", inter,
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, R"(, "tie_word_embeddings": )", tied ? "true" : "false",
                          "}");
    } else if (family == 1) {
      json = absl::StrCat(R"({"model_type": "qwen3_moe", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "num_key_value_heads": )", kv, R"(, "head_dim": )", hd,
                          R"(, "intermediate_size": )", inter,
                          R"(, "moe_intermediate_size": )", inter / 2,
                          R"(, "num_experts": )", experts,
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, "}");
    } else {
      json = absl::StrCat(R"({"model_type": "deepseek_v3", "hidden_size": )", hidden,
                          R"(, "num_attention_heads": )", heads,
                          R"(, "intermediate_size": )", inter,
                          R"(, "moe_intermediate_size": )", inter / 2,
                          R"(, "n_routed_experts": )", experts,
                          R"(, "n_shared_experts": 1, "first_k_dense_replace": )",
                          pick({0, 1}), R"(, "topk_method": "noaux_tc")",
                          R"(, "num_hidden_layers": )", layers, R"(, "vocab_size": )",
                          vocab, R"(, "q_lora_rank": )", pick({0, 6}),
                          R"(, "kv_lora_rank": 4, )",
                          R"("qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2})");
    }
    // Trainer: megatron (tp | kv heads, pp <= layers) or fsdp.
    std::string trainer;
    TrainerExpect expect;
    if (rng() % 4 == 0) {
      const int64_t dp = pick({1, 2, 3}), shard = pick({1, dp});
      trainer = absl::StrCat("fsdp:dp=", dp, ",shard=", shard);
      expect = Fsdp(dp, shard);
    } else {
      MegatronOpts o;
      o.tp = family == 2 ? pick({1, 2}) : std::min<int64_t>(kv, pick({1, 2}));
      if (family == 2 && heads % o.tp != 0) o.tp = 1;
      o.pp = std::min<int64_t>(layers, pick({1, 2, 3}));
      o.dp = pick({1, 2});
      o.etp = pick({1, o.tp});
      const int64_t stage = o.tp * o.dp / o.etp;
      o.ep = pick({1, stage});
      if (experts % o.ep != 0) o.ep = 1;
      o.grouped = rng() % 2;
      o.chunk = (inter / 2 / o.etp) % 2 == 0 ? pick({0, 2}) : 0;
      trainer = absl::StrCat("megatron:tp=", o.tp, ",pp=", o.pp, ",dp=", o.dp,
                             ",ep=", o.ep, ",etp=", o.etp,
                             ",experts=", o.grouped ? "grouped" : "indexed",
                             ",glu_chunk=", o.chunk);
      expect = Megatron(o);
    }
    // Engine: vllm tp | heads (and tp | kv or kv | tp), padded vocab / tp.
    int64_t tp = pick({1, 2, 4});
    while (heads % tp != 0 || (tp % kv != 0 && kv % tp != 0) ||
           ((inter / 2) % tp != 0) || (inter % tp != 0)) {
      tp /= 2;
    }
    const int64_t dp = pick({1, 2});
    const bool ep = family != 0 && rng() % 2 && experts >= tp * dp;
    // DeepSeek (8 expert groups by default) may place experts round-robin.
    const bool round_robin = ep && family == 2 && rng() % 2;
    const std::string engine =
        absl::StrCat("vllm:tp=", tp, ",dp=", dp, ep ? absl::StrCat(",ep=", tp * dp) : "",
                     round_robin ? ",placement=round_robin" : "");
    RunCase(json, trainer, expect, engine, tp, dp, ep);
    if (HasFailure()) {
      ADD_FAILURE() << "iteration " << iter << ": " << json;
      return;
    }
  }
}

// --- impossible layouts --------------------------------------------------------

absl::Status EngineError(const std::string& model, const std::string& engine) {
  auto c = LoadModelConfig(model);
  auto es = ParseEngineSpec(engine);
  if (!c.ok()) return c.status();
  if (!es.ok()) return es.status();
  return BuildEngineLayout(*c, *es).status();
}
absl::Status TrainerError(const std::string& model, const std::string& trainer) {
  auto c = LoadModelConfig(model);
  auto ts = ParseTrainerSpec(trainer);
  if (!c.ok()) return c.status();
  if (!ts.ok()) return ts.status();
  return BuildTrainerLayout(*c, *ts).status();
}

TEST(ConventionsTest, Fp8LayoutSplittingAScaleBlockIsAnError) {
  // q_b_proj has 4 heads x 192 rows: tp=4 gives 192 rows per rank.
  absl::Status s = EngineError("tiny-deepseek-v3-fp8", "vllm:tp=4");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_b_proj"));
  EXPECT_THAT(s.message(), HasSubstr("split a 128x128"));
}

TEST(ConventionsTest, TpNotDividingHeadsIsAnError) {
  absl::Status s = EngineError("tiny-llama", "vllm:tp=8");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_attention_heads"));
  s = TrainerError("tiny-llama", "megatron:tp=4");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("query groups"));
}

TEST(ConventionsTest, EpNotDividingExpertsAndBadPipelineAreErrors) {
  absl::Status s = TrainerError("tiny-qwen3-moe", "megatron:tp=1,dp=3,ep=3");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("experts"));
  s = TrainerError("tiny-llama", "megatron:pp=4,first=1,last=1");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("first=1"));
  s = TrainerError("tiny-qwen3-moe", "megatron:tp=2,ep=1,etp=1,glu_chunk=3");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("glu_chunk"));
}

}  // namespace
}  // namespace refit
