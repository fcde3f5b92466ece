#include "testing/gtp_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/reference_quantizer.h"

namespace refit::testing {
namespace {

using testing_mapping::Arr;
using testing_mapping::Bufs;
using testing_mapping::Ckpt;

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A value of a BF16 weight: bf16-representable, roughly N(0, 0.05).
float Bf16Value(uint64_t h) {
  double u = 0;
  for (int k = 0; k < 4; ++k) u += static_cast<double>((Mix(h + k) >> 11) & 0xFFFF) / 65536.0;
  float f = static_cast<float>((u - 2.0) * 0.08);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b &= 0xFFFF0000u;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<float> Values(const std::string& name, int64_t n, uint64_t seed) {
  uint64_t base = seed;
  for (char ch : name) base = Mix(base ^ static_cast<uint8_t>(ch));
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Bf16Value(base + 4 * i);
  return v;
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Arr Bytes(std::vector<int64_t> shape, DType dtype, const void* p, size_t n) {
  Arr a;
  a.shape = std::move(shape);
  a.dtype = dtype;
  a.bytes.assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  return a;
}

Arr Bf16(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    h[i] = static_cast<uint16_t>(b >> 16);  // the values are bf16 already
  }
  return Bytes(shape, DType::kBF16, h.data(), h.size() * 2);
}

// Linear weights of one engine parameter (a fused group sharing NVFP4's
// amax per leading index; leading dims alike) into ckpt.
void AddQuantized(Ckpt* ckpt, LowPrecision f, const std::vector<std::string>& names,
                  const std::vector<std::vector<int64_t>>& shapes, uint64_t seed) {
  std::vector<std::vector<float>> vals;
  for (size_t i = 0; i < names.size(); ++i) {
    vals.push_back(Values(names[i], Count(shapes[i]), seed));
  }
  for (size_t i = 0; i < names.size() && f == LowPrecision::kMxfp8; ++i) {
    std::vector<int64_t> sshape = shapes[i];
    sshape.back() /= 32;
    Quantized q = ReferenceMxfp8Quantize(vals[i], shapes[i]);
    (*ckpt)[names[i]] = Bytes(shapes[i], DType::kF8E4M3, q.values.data(), q.values.size());
    (*ckpt)[names[i] + "_scale"] =
        Bytes(sshape, DType::kU8, q.scale_bytes.data(), q.scale_bytes.size());
  }
  if (f == LowPrecision::kMxfp8) return;
  const std::vector<int64_t> gshape(shapes[0].begin(), shapes[0].end() - 2);
  const int64_t lead = Count(gshape);
  std::vector<float> amax(lead, 0.0f);
  for (const std::vector<float>& v : vals) {
    const int64_t per = static_cast<int64_t>(v.size()) / lead;
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
      amax[i / per] = std::max(amax[i / per], std::fabs(v[i]));
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<int64_t> pshape = shapes[i], sshape = shapes[i];
    pshape.back() /= 2;
    sshape.back() /= 16;
    Quantized q = ReferenceNvfp4Quantize(vals[i], shapes[i], amax);
    (*ckpt)[names[i]] = Bytes(pshape, DType::kU8, q.values.data(), q.values.size());
    (*ckpt)[names[i] + "_scale"] =
        Bytes(sshape, DType::kF8E4M3, q.scale_bytes.data(), q.scale_bytes.size());
    if (i == 0) {
      (*ckpt)[names[i] + "_scale_2"] =
          Bytes(gshape, DType::kF32, q.global_scales.data(), q.global_scales.size() * 4);
    }
  }
}

// A quantized TP-local weight: codes and block scales, rows alike.
struct QW {
  Arr codes, scale;
  Arr global;  // NVFP4: f32 [] (empty bytes: none)
};

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

QW Rows(const QW& w, int64_t r0, int64_t n) {
  return {testing_mapping::Slice(w.codes, 0, r0, n), testing_mapping::Slice(w.scale, 0, r0, n),
          w.global};
}

// Columns [c0, c0 + n) of the logical K (`k` wide).
QW Cols(const QW& w, int64_t k, int64_t c0, int64_t n) {
  auto cut = [&](const Arr& a) {
    const int64_t per = k / a.shape[1];
    return testing_mapping::Slice(a, 1, c0 / per, n / per);
  };
  return {cut(w.codes), cut(w.scale), w.global};
}

QW CatRows(const std::vector<QW>& parts) {
  std::vector<Arr> c, s;
  for (const QW& p : parts) {
    c.push_back(p.codes);
    s.push_back(p.scale);
  }
  return {testing_mapping::Cat(0, c), testing_mapping::Cat(0, s), parts[0].global};
}

// Member e of a stacked weight (and its global scale's element e).
QW Expert(const Ckpt& ckpt, const std::string& name, int64_t e, bool global) {
  QW w{testing_mapping::Member(ckpt.at(name), e),
       testing_mapping::Member(ckpt.at(name + "_scale"), e), Arr{}};
  if (global) {
    const Arr& g = ckpt.at(name + "_scale_2");
    w.global = Bytes({}, DType::kF32, g.bytes.data() + 4 * e, 4);
  }
  return w;
}

QW Whole(const Ckpt& ckpt, const std::string& name, bool global) {
  QW w{ckpt.at(name), ckpt.at(name + "_scale"), Arr{}};
  if (global) w.global = ckpt.at(name + "_scale_2");
  return w;
}

// Rows [g*S, (g+1)*S) of `a` padded to a multiple of align*G rows, as a
// [rows_out, cols_out] array (the rest `pad`).
Arr GtpSlice(const Arr& a, int64_t G, int64_t g, int64_t align, int64_t rows_out,
             int64_t cols_out, uint8_t pad) {
  const int64_t r = a.shape[0], c = a.shape[1], es = a.esize();
  const int64_t s = RoundUp(r, align * G) / G;
  Arr out;
  out.dtype = a.dtype;
  out.shape = {rows_out < 0 ? s : rows_out, cols_out < 0 ? c : cols_out};
  out.bytes.assign(out.shape[0] * out.shape[1] * es, pad);
  for (int64_t i = 0; i < s; ++i) {
    const int64_t src = g * s + i;
    if (src >= r) break;
    std::memcpy(out.bytes.data() + i * out.shape[1] * es, a.bytes.data() + src * c * es, c * es);
  }
  return out;
}

// "<...>.weight<j>" -> "<...>.weight<ins><j>".
std::string Insert(const std::string& name, const char* ins) {
  std::string s = name;
  s.insert(s.rfind("weight") + 6, ins);
  return s;
}

}  // namespace

absl::StatusOr<Ckpt> LowPrecisionCheckpoint(const ModelConfig& c, LowPrecision f,
                                            uint64_t seed) {
  if (c.family != ModelFamily::kDense && c.family != ModelFamily::kQwen3Moe) {
    return absl::InvalidArgumentError("gtp reference: dense and qwen3_moe models only");
  }
  Ckpt ck;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim;
  auto bf16 = [&](const std::string& n, std::vector<int64_t> shape) {
    ck[n] = Bf16(shape, Values(n, Count(shape), seed));
  };
  bf16("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    bf16(p + "input_layernorm.weight", {h});
    bf16(p + "post_attention_layernorm.weight", {h});
    if (c.qk_norm) {
      bf16(p + "self_attn.q_norm.weight", {c.head_dim});
      bf16(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    AddQuantized(&ck, f,
                 {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                  p + "self_attn.v_proj.weight"},
                 {{q, h}, {kv, h}, {kv, h}}, seed);
    AddQuantized(&ck, f, {p + "self_attn.o_proj.weight"}, {{h, q}}, seed);
    if (c.num_experts > 0) {
      const int64_t e = c.num_experts, im = c.moe_intermediate_size;
      bf16(p + "mlp.gate.weight", {e, h});
      AddQuantized(&ck, f,
                   {p + "mlp.experts.{}.gate_proj.weight", p + "mlp.experts.{}.up_proj.weight"},
                   {{e, im, h}, {e, im, h}}, seed);
      AddQuantized(&ck, f, {p + "mlp.experts.{}.down_proj.weight"}, {{e, h, im}}, seed);
    } else {
      const int64_t i = c.intermediate_size;
      AddQuantized(&ck, f, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                   {{i, h}, {i, h}}, seed);
      AddQuantized(&ck, f, {p + "mlp.down_proj.weight"}, {{h, i}}, seed);
    }
  }
  bf16("model.norm.weight", {h});
  if (!c.tie_word_embeddings) bf16("lm_head.weight", {c.vocab_size, h});
  return ck;
}

Bufs MegatronGtpRank(const ModelConfig& c, const GtpTrainer& t, const Ckpt& ck, int64_t rank,
                     uint8_t pad) {
  const bool nv = t.format == LowPrecision::kNvfp4;
  const int64_t align = nv ? 16 : 32;
  const int64_t w = rank % t.world();
  const int64_t tpr = w % t.tp, g = (w / t.tp) % t.gtp;
  const int64_t etpr = w % t.etp, epr = (w / t.etp) % t.ep;
  const int64_t eg = (w / (t.etp * t.ep)) % t.egtp;
  Bufs out;
  auto emit_q = [&](const std::string& name, const QW& x, int64_t G, int64_t gr) {
    out[name] = GtpSlice(x.codes, G, gr, align, -1, -1, pad);
    const int64_t s = out[name].shape[0];
    out[Insert(name, "_scale")] =
        GtpSlice(x.scale, G, gr, align, RoundUp(s, 128), RoundUp(x.scale.shape[1], 4), pad);
    if (nv) out[Insert(name, "_global_scale")] = x.global;
  };
  auto emit_rows = [&](const std::string& name, const Arr& a) {
    out[name] = GtpSlice(a, t.gtp, g, align, -1, -1, pad);
  };
  const int64_t h = c.hidden_size, hd = c.head_dim;
  // Vocabulary-parallel rows, padded to vocab_div * tp (unsourced rows: pad).
  auto vocab = [&](const Arr& a) {
    const int64_t vp = RoundUp(c.vocab_size, t.vocab_div * t.tp) / t.tp;
    Arr local = testing_mapping::Zeros({vp, h}, a.dtype);
    std::fill(local.bytes.begin(), local.bytes.end(), pad);
    const int64_t r0 = tpr * vp, n = std::max<int64_t>(0, std::min(vp, c.vocab_size - r0));
    if (n > 0) {
      Arr part = testing_mapping::Slice(a, 0, r0, n);
      std::copy(part.bytes.begin(), part.bytes.end(), local.bytes.begin());
    }
    return local;
  };
  emit_rows("embedding.word_embeddings.weight", vocab(ck.at("model.embed_tokens.weight")));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string m = absl::StrCat("decoder.layers.", l, ".");
    out[m + "self_attention.linear_qkv.layer_norm_weight"] = ck.at(p + "input_layernorm.weight");
    if (c.qk_norm) {
      out[m + "self_attention.q_layernorm.weight"] = ck.at(p + "self_attn.q_norm.weight");
      out[m + "self_attention.k_layernorm.weight"] = ck.at(p + "self_attn.k_norm.weight");
    }
    // linear_qkv: per query group of this TP rank, [q heads; k; v].
    const QW qw = Whole(ck, p + "self_attn.q_proj.weight", nv);
    const QW kw = Whole(ck, p + "self_attn.k_proj.weight", false);
    const QW vw = Whole(ck, p + "self_attn.v_proj.weight", false);
    const int64_t groups = c.num_kv_heads / t.tp, qpg = c.num_heads / c.num_kv_heads;
    std::vector<QW> parts;
    for (int64_t j = tpr * groups; j < (tpr + 1) * groups; ++j) {
      parts.push_back(Rows(qw, j * qpg * hd, qpg * hd));
      parts.push_back(Rows(kw, j * hd, hd));
      parts.push_back(Rows(vw, j * hd, hd));
    }
    emit_q(m + "self_attention.linear_qkv.weight", CatRows(parts), t.gtp, g);
    const int64_t qdim = c.num_heads * hd;
    emit_q(m + "self_attention.linear_proj.weight",
           Cols(Whole(ck, p + "self_attn.o_proj.weight", nv), qdim, tpr * qdim / t.tp,
                qdim / t.tp),
           t.gtp, g);
    if (c.num_experts > 0) {
      out[m + "pre_mlp_layernorm.weight"] = ck.at(p + "post_attention_layernorm.weight");
      out[m + "mlp.router.weight"] = ck.at(p + "mlp.gate.weight");
      const int64_t el = c.num_experts / t.ep, im = c.moe_intermediate_size;
      const int64_t n = im / t.etp, i0 = etpr * n;
      std::vector<QW> fc1, fc2;
      for (int64_t j = 0; j < el; ++j) {
        const int64_t e = epr * el + j;
        const QW gate = Expert(ck, p + "mlp.experts.{}.gate_proj.weight", e, nv);
        const QW up = Expert(ck, p + "mlp.experts.{}.up_proj.weight", e, false);
        fc1.push_back(CatRows({Rows(gate, i0, n), Rows(up, i0, n)}));
        const QW down = Expert(ck, p + "mlp.experts.{}.down_proj.weight", e, nv);
        fc2.push_back(Cols(down, im, i0, n));
        if (t.grouped_experts) continue;
        emit_q(absl::StrCat(m, "mlp.experts.linear_fc1.weight", j), fc1.back(), t.egtp, eg);
        emit_q(absl::StrCat(m, "mlp.experts.linear_fc2.weight", j), fc2.back(), t.egtp, eg);
      }
      // ModelOpt's grouped parameter: stacked, scales unpadded, one global
      // scale per local expert.
      for (int k = 0; k < 2 && t.grouped_experts; ++k) {
        const std::vector<QW>& parts = k == 0 ? fc1 : fc2;
        const std::string name =
            m + (k == 0 ? "mlp.experts.linear_fc1.weight" : "mlp.experts.linear_fc2.weight");
        std::vector<Arr> codes, scales;
        std::vector<uint8_t> globals;
        for (const QW& x : parts) {
          codes.push_back(x.codes);
          scales.push_back(x.scale);
          globals.insert(globals.end(), x.global.bytes.begin(), x.global.bytes.end());
        }
        out[name] = testing_mapping::Stack(codes);
        out[Insert(name, "_scale")] = testing_mapping::Stack(scales);
        if (nv) out[Insert(name, "_global_scale")] = Bytes({el}, DType::kF32, globals.data(), globals.size());
      }
    } else {
      out[m + "mlp.linear_fc1.layer_norm_weight"] = ck.at(p + "post_attention_layernorm.weight");
      const int64_t im = c.intermediate_size, n = im / t.tp, i0 = tpr * n;
      const QW gate = Whole(ck, p + "mlp.gate_proj.weight", nv);
      const QW up = Whole(ck, p + "mlp.up_proj.weight", false);
      emit_q(m + "mlp.linear_fc1.weight", CatRows({Rows(gate, i0, n), Rows(up, i0, n)}), t.gtp,
             g);
      emit_q(m + "mlp.linear_fc2.weight", Cols(Whole(ck, p + "mlp.down_proj.weight", nv), im, i0, n),
             t.gtp, g);
    }
  }
  out["decoder.final_layernorm.weight"] = ck.at("model.norm.weight");
  if (!c.tie_word_embeddings) emit_rows("output_layer.weight", vocab(ck.at("lm_head.weight")));
  return out;
}

}  // namespace refit::testing
