// An independent statement of what a Megatron trainer in Transformer
// Engine's native MXFP8 / NVFP4 parameters with Generalized Tensor
// Parallelism (GTP_remat) holds on each rank, and of the logical tensors an
// engine of the same format receives, written from Megatron-LM's and TE's
// source (see mapping/gtp.h for the commits read), not from mapping/'s
// tables: Megatron's TP-local parameters by explicit slicing and
// concatenation, each padded at the tail of dim 0 to a multiple of
// pad_for_alignment * G rows and cut into G equal slices, scale_inv in TE's
// padded [round_up(rows, 128), round_up(cols, 4)] shape. Qwen3 (dense) and
// Qwen3-MoE models, one pipeline stage.
#ifndef REFIT_TESTING_GTP_REFERENCE_H_
#define REFIT_TESTING_GTP_REFERENCE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "mapping/model_config.h"
#include "mapping/testing/arrays.h"

namespace refit::testing {

enum class LowPrecision { kMxfp8, kNvfp4 };

// megatron:tp=,gtp=,dp=,ep=,etp=,egtp=,weights= with pp = 1; experts
// indexed (TE's GroupedLinear: weight0..N per local expert, each a TE
// tensor) or grouped (ModelOpt's one [E_local, ...] parameter with
// [E_local, N, K/b] scales and [E_local] global scales, egtp = 1).
struct GtpTrainer {
  int64_t tp = 1, gtp = 1, dp = 1, ep = 1, etp = 1, egtp = 1;
  bool grouped_experts = false;
  int64_t vocab_div = 128;
  LowPrecision format = LowPrecision::kMxfp8;
  int64_t world() const { return tp * gtp * dp; }
};

// The logical tensors (HF names, whole) of a BF16 model with values from a
// seeded generator, its linear weights quantized as the engine holds them:
// MXFP8 (ReferenceMxfp8Quantize: e4m3 "<w>", u8 "<w>_scale" [.., K/32]) or
// NVFP4 (ReferenceNvfp4Quantize: packed u8 "<w>" [.., K/2], e4m3
// "<w>_scale" [.., K/16], f32 "<leader>_scale_2" with one amax over q/k/v,
// over gate/up, and per expert over its gate/up); norms, embeddings,
// lm_head and the router bf16. INVALID_ARGUMENT for a family other than
// dense or qwen3_moe.
absl::StatusOr<testing_mapping::Ckpt> LowPrecisionCheckpoint(const ModelConfig& c,
                                                             LowPrecision f, uint64_t seed);

// The buffers trainer rank `rank` registers, by Megatron name, holding the
// parts of `ckpt` (LowPrecisionCheckpoint of the same format); every
// padding byte (GTP tail rows, vocabulary rows past the model's, TE's
// scale_inv padding) is `pad`. Ranks: dense tp-gtp-dp, experts
// etp-ep-egtp-edp.
testing_mapping::Bufs MegatronGtpRank(const ModelConfig& c, const GtpTrainer& t,
                                      const testing_mapping::Ckpt& ckpt, int64_t rank,
                                      uint8_t pad);

}  // namespace refit::testing

#endif  // REFIT_TESTING_GTP_REFERENCE_H_
