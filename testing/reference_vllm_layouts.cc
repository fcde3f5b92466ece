#include "testing/reference_vllm_layouts.h"

#include <algorithm>
#include <cstring>

#include "testing/reference_nvfp4_vllm.h"
#include "testing/reference_quantizer.h"

namespace refit::testing {
namespace {

constexpr int64_t kBlock = 128;

// A loaded engine matrix before post-processing: the checkpoint's values
// (bf16) or FP8 codes and scales, [rows, cols].
struct Loaded {
  int64_t rows = 0, cols = 0;
  std::vector<float> bf16;    // values (not FP8)
  Quantized q;                // codes and scales (FP8)
};

uint16_t Bf16Bits(float x) {  // the values are bf16-exact
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return static_cast<uint16_t>(b >> 16);
}

// The checkpoint holds the FP8 quantization of the whole logical weight;
// vLLM's loader copies the shard's codes and its scale blocks.
Loaded LoadShard(const HostWeight& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                 bool fp8) {
  Loaded out;
  out.rows = r1 - r0;
  out.cols = c1 - c0;
  if (!fp8) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) out.bf16.push_back(w.v[r * w.cols + c]);
    }
    return out;
  }
  const Quantized whole = ReferenceQuantize(w.v, {w.rows, w.cols}, kBlock, false);
  const int64_t tc = (w.cols + kBlock - 1) / kBlock;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) out.q.values.push_back(whole.values[r * w.cols + c]);
  }
  for (int64_t i = r0 / kBlock; i < (r1 + kBlock - 1) / kBlock; ++i) {
    for (int64_t j = c0 / kBlock; j < (c1 + kBlock - 1) / kBlock; ++j) {
      out.q.scales.push_back(whole.scales[i * tc + j]);
    }
  }
  return out;
}

// Rows of `b` after those of `a` (weight rows and scale block rows).
void AppendRows(Loaded* a, const Loaded& b) {
  a->cols = b.cols;
  a->rows += b.rows;
  a->bf16.insert(a->bf16.end(), b.bf16.begin(), b.bf16.end());
  a->q.values.insert(a->q.values.end(), b.q.values.begin(), b.q.values.end());
  a->q.scales.insert(a->q.scales.end(), b.q.scales.begin(), b.q.scales.end());
}

// process_weights_after_loading for one matrix: DeepGEMM requantizes to
// UE8M0 (SM90 keeps the f32 scales row-major).
void PostProcess(Loaded* m, const VllmFormat& f) {
  if (f.fp8 && (f.kernel == VllmKernel::kDeepgemm || f.kernel == VllmKernel::kDeepgemmSm100)) {
    m->q = ReferenceRequantUe8m0(m->q, {m->rows, m->cols}, kBlock);
  }
}

void Emit(const Loaded& m, const VllmFormat& f, EngineBytes* out) {
  if (!f.fp8) {
    for (float x : m.bf16) {
      const uint16_t h = Bf16Bits(x);
      out->weight.push_back(static_cast<uint8_t>(h & 0xFF));
      out->weight.push_back(static_cast<uint8_t>(h >> 8));
    }
    return;
  }
  out->weight.insert(out->weight.end(), m.q.values.begin(), m.q.values.end());
  if (f.kernel == VllmKernel::kDeepgemmSm100) {
    // deepgemm_post_process_fp8_weight_block on SM100: the requantized
    // scales through transform_sf_into_required_layout.
    const std::vector<uint8_t> packed = ReferenceDeepgemmSm100Scales(m.q.scales, m.rows, m.cols);
    out->scale.insert(out->scale.end(), packed.begin(), packed.end());
    return;
  }
  const size_t at = out->scale.size();
  out->scale.resize(at + m.q.scales.size() * 4);
  std::memcpy(out->scale.data() + at, m.q.scales.data(), m.q.scales.size() * 4);
}

// swap_w13_to_w31: x.reshape(-1, 2, rows / 2, cols).flip(1) for one
// expert's [rows, cols] weight (and, with the same statement, its scale
// grid [rows / 128, cols / 128]).
template <typename T>
std::vector<T> FlipHalves(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<T> y(x.size());
  const int64_t half = rows / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = r < half ? r + half : r - half;
    std::memcpy(&y[r * cols], &x[from * cols], cols * sizeof(T));
  }
  return y;
}

// prepare_fp8_moe_layer_for_fi (vLLM main after 487151d) clamps the
// experts' w13 and w2 block scales to at least 1e-10 (dead experts' near-zero
// scales give NaN in FlashInfer's CUTLASS kernel on SM90).
void ClampFlashinferScales(Loaded* m) {
  for (float& s : m->q.scales) s = std::max(s, 1e-10f);
}

}  // namespace

EngineBytes VllmLinear(const HostWeight& w, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1, const VllmFormat& f) {
  Loaded m = LoadShard(w, r0, r1, c0, c1, f.fp8);
  PostProcess(&m, f);
  EngineBytes out;
  Emit(m, f, &out);
  return out;
}

EngineBytes VllmMerged(const std::vector<const HostWeight*>& parts, int64_t r0,
                       int64_t r1, const VllmFormat& f) {
  Loaded m;
  for (const HostWeight* p : parts) AppendRows(&m, LoadShard(*p, r0, r1, 0, p->cols, f.fp8));
  PostProcess(&m, f);
  EngineBytes out;
  Emit(m, f, &out);
  return out;
}

EngineBytes VllmW13(const std::vector<HostWeight>& gate, const std::vector<HostWeight>& up,
                    const std::vector<int64_t>& experts, int64_t i0, int64_t i1,
                    const VllmFormat& f) {
  EngineBytes out;
  for (int64_t e : experts) {
    Loaded m = LoadShard(gate[e], i0, i1, 0, gate[e].cols, f.fp8);
    AppendRows(&m, LoadShard(up[e], i0, i1, 0, up[e].cols, f.fp8));
    PostProcess(&m, f);
    if (f.kernel == VllmKernel::kFlashinfer) {
      const int64_t tc = (m.cols + kBlock - 1) / kBlock;
      if (f.fp8) {
        m.q.values = FlipHalves(m.q.values, m.rows, m.cols);
        m.q.scales = FlipHalves(m.q.scales, static_cast<int64_t>(m.q.scales.size()) / tc, tc);
        ClampFlashinferScales(&m);
      } else {
        m.bf16 = FlipHalves(m.bf16, m.rows, m.cols);
      }
    }
    Emit(m, f, &out);
  }
  return out;
}

EngineBytes VllmW2(const std::vector<HostWeight>& down, const std::vector<int64_t>& experts,
                   int64_t i0, int64_t i1, const VllmFormat& f) {
  EngineBytes out;
  for (int64_t e : experts) {
    Loaded m = LoadShard(down[e], 0, down[e].rows, i0, i1, f.fp8);
    PostProcess(&m, f);
    if (f.fp8 && f.kernel == VllmKernel::kFlashinfer) ClampFlashinferScales(&m);
    Emit(m, f, &out);
  }
  return out;
}

}  // namespace refit::testing
