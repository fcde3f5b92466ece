// TrainerSpec / EngineSpec: how each side is parallelized, parsed from the
// CLI's compact form.
//
//   megatron:tp=8,pp=16,ep=16,etp=1,dp=2[,first=3,last=2]
//            [,experts=indexed|grouped][,glu_chunk=N][,vocab_div=128]
//            [,gtp=2][,egtp=2][,weights=mxfp8|nvfp4][,amax=gtp|tp]
//            [,gpus_per_host=8]
//   fsdp:dp=64[,shard=8][,gpus_per_host=8]     (shard < dp: HSDP)
//   vllm:tp=32,dp=8[,ep=256][,gpus_per_host=8][,kernel=flashinfer|deepgemm]
//        [,quant=fp8|fp8-ue8m0|mxfp8|nvfp4][,recipe=modelopt|vllm]
//   sglang:tp=16,dp=2[,ep=16][,kernel=flashinfer] (ep divides tp)
//
// Megatron keys: tp, pp, dp (data-parallel size; world = tp*pp*dp), ep, etp
// (expert tensor parallel, default = tp), first/last (layers of the first /
// last pipeline stage; the other stages split the rest evenly), experts
// (indexed: one buffer per local expert, "weight0..N-1", as TEGroupedMLP;
// grouped: one [E_local, ...] buffer per weight), glu_chunk (expert
// linear_fc1 rows alternate gate/up in chunks of N rows; 0 = [gate; up]),
// vocab_div (make_vocab_size_divisible_by; padding = multiple of
// vocab_div * tp). Generalized Tensor Parallelism (Megatron-LM's GTP_remat,
// mapping/gtp.h): gtp (dense weights, --tensor-parallel-num-weight-shards /
// tp) and egtp (routed experts, --expert-tensor-parallel-num-weight-shards /
// etp) cut each TP-local linear weight along dim 0 into that many row
// slices, padded at the tail; world = tp*gtp*dp*pp (dp the replicate
// degree). weights: the trainer's linear weights as Transformer Engine's
// native MXFP8Tensor / NVFP4Tensor (rowwise data and compact scale_inv);
// absent: the model's dtype. amax (NVFP4): which ranks share a weight's
// per-tensor amax: gtp (default: each TP / expert-TP shard has its own,
// shared by its GTP peers) or tp (one over the whole parameter).
// vLLM keys: tp, dp, ep (expert parallel over all tp*dp ranks: must equal
// tp*dp), vocab_pad (default 64), kernel (the layout vLLM's kernels read
// after its post-load processing; absent: the checkpoint layout, which
// Triton and CUTLASS read; docs/kernel-layouts.md). SGLang: kernel=flashinfer
// for BF16 experts loaded [up; gate] (FlashInfer CUTLASS MoE); its other
// kernel layouts are refused (docs/engines.md).
#ifndef REFIT_MAPPING_PARALLEL_SPEC_H_
#define REFIT_MAPPING_PARALLEL_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "layout/quant_format.h"

namespace refit {

struct TrainerSpec {
  enum class Kind { kMegatron, kFsdp };
  Kind kind = Kind::kMegatron;
  int32_t tp = 1;
  int32_t pp = 1;
  int32_t dp = 1;
  int32_t ep = 1;
  int32_t etp = 0;  // 0 = tp
  int64_t first = 0;  // 0 = even split
  int64_t last = 0;
  bool grouped_experts = false;
  int64_t glu_chunk = 0;
  int64_t vocab_divisor = 128;
  int32_t shard = 0;  // fsdp: shard group size (0 = dp)
  int32_t gpus_per_host = 0;
  // Megatron GTP (mapping/gtp.h): row slices of each TP-local weight.
  int32_t gtp = 1;
  int32_t egtp = 1;
  // The trainer's linear weights: the model's dtype (absent), or TE's
  // native MXFP8 / NVFP4 tensors (QuantFormat::kMxfp8 / kNvfp4).
  std::optional<QuantFormat> weights;
  // NVFP4: the ranks sharing one weight's amax (global scale): its GTP
  // peers only (kGtp), or all of its TP and GTP peers (kTp).
  enum class AmaxScope { kGtp, kTp };
  AmaxScope amax = AmaxScope::kGtp;

  // Ranks of one pipeline stage (Megatron): tp * gtp * dp.
  int32_t stage_size() const { return tp * gtp * dp; }
  int32_t world_size() const {
    return kind == Kind::kMegatron ? stage_size() * pp : dp;
  }
  int32_t expert_tp() const { return etp > 0 ? etp : tp; }
};

struct EngineSpec {
  enum class Kind { kVllm, kSglang };
  Kind kind = Kind::kVllm;
  int32_t tp = 1;
  int32_t dp = 1;
  // vLLM: 0 = experts TP-sharded; else == tp * dp (experts spread over all
  // ranks). SGLang: 0 = TP-sharded; else ep divides tp: experts spread over
  // ep ranks of each TP group, each expert sharded over tp / ep of them.
  int32_t ep = 0;
  // vLLM's --expert-placement-strategy with ep > 0: linear (rank k holds a
  // contiguous run of experts) or round_robin (rank k holds experts k,
  // k + ep, k + 2*ep, ...). It must be the placement vLLM actually uses: it
  // falls back to linear (with a warning in its log) for models without
  // expert groups, with EPLB, or with an all2all backend other than DeepEP
  // low-latency / NIXL EP.
  bool round_robin = false;
  int64_t vocab_pad = 64;
  int32_t gpus_per_host = 0;
  // quant= (the row of layout/quant_format.h the engine's weights are;
  // absent: the model's dtype). quant=fp8 (QuantFormat::kFp8Block): the
  // engine serves the model as FP8 block-quantized weights
  // (e4m3 + an f32 weight_scale_inv per 128x128 tile, the tensors an FP8
  // block checkpoint gives vLLM's loader) whatever the trainer holds; refit
  // quantizes on the way. quant=fp8-ue8m0 (kFp8BlockUe8m0): the same with
  // every scale a power of two (DeepGEMM's UE8M0 scales). quant=mxfp8: vLLM's online
  // MXFP8 (quantization="mxfp8"): every quantizable linear weight e4m3 with
  // a uint8 E8M0 weight_scale per 1 x 32 block along K, [..., N, K/32].
  // quant=nvfp4: vLLM's ModelOpt NVFP4 parameters after loading: every
  // quantizable linear weight uint8 [..., N, K/2] (E2M1 pairs, even element
  // low), an f8e4m3 weight_scale [..., N, K/16] and one f32 global scale per
  // engine parameter (weight_global_scale, 0-dim; MoE w13_weight_scale_2 /
  // w2_weight_scale_2 [E]) over its fused parts (exec/nvfp4.h); with
  // kernel=flashinfer the block scales in vLLM's swizzled 128 x 4 tiles.
  // kernel=deepgemm serves kFp8Block weights requantized
  // (kFp8BlockRequantUe8m0: KernelRow::requant).
  std::optional<QuantFormat> quant;
  // recipe= (quant=nvfp4 only): which recipe made the engine's NVFP4 bytes
  // (plan/conversion.h Nvfp4Recipe). modelopt (the default): the engine
  // loaded a ModelOpt NVFP4 checkpoint, every quantizable linear weight.
  // vllm: vLLM quantized a BF16 checkpoint itself (--quantization
  // nvfp4_per_token): its routed experts only (Nvfp4OnlineMoEMethod; vLLM
  // has no online NVFP4 linear method, online/base.py at 030ea52), the
  // other weights in the model dtype.
  enum class Recipe { kModelopt, kVllm };
  Recipe recipe = Recipe::kModelopt;
  // kernel=: vLLM post-processes some weights after loading for the kernel
  // that reads them; the engine tensors are then that layout, not the
  // checkpoint's (mapping/engine_vllm.h has the rows, docs/kernel-layouts.md
  // the list). kCheckpoint: no post-processing (Triton, CUTLASS).
  // kFlashinfer: FlashInfer CUTLASS fused MoE, expert w13 as [up; gate]
  // (w31), block scales alike. kDeepgemm: DeepGEMM block FP8 on SM90,
  // weights requantized to power-of-two scales, scales row-major f32.
  // kDeepgemmSm100 (kernel=deepgemm-sm100): DeepGEMM on SM100 (vLLM on
  // Blackwell with VLLM_USE_DEEP_GEMM, is_blackwell_deep_gemm_e8m0_used):
  // the same requantized weights, their scales as DeepGEMM's
  // transform_sf_into_required_layout leaves them, UE8M0 exponents packed
  // four to an int32, MN-major (exec/convert/deepgemm_sm100_scales.h).
  enum class Kernel { kCheckpoint, kFlashinfer, kDeepgemm, kDeepgemmSm100 };
  Kernel kernel = Kernel::kCheckpoint;

  int32_t world_size() const { return tp * dp; }
};

// What a kernel= layout asks of quantized weights: one row per kernel.
struct KernelRow {
  EngineSpec::Kernel kernel;
  const char* name;  // the kernel= value
  // How the engine's block scales lie (row-major, FlashInfer's 128 x 4
  // tiles for MXFP8 / NVFP4, DeepGEMM SM100's packed exponent bytes).
  ScaleSwizzle swizzle;
  // Block-FP8 weights requantized to power-of-two scales (DeepGEMM).
  bool requant;
  // One line saying what the layout writes, for `refit buffers` and
  // `refit simulate`: "checkpoint layout (what Triton and CUTLASS read)", ...
  const char* summary;
};

// The row of kernel `k`.
const KernelRow& KernelTraits(EngineSpec::Kernel k);

// "checkpoint", "flashinfer", "deepgemm", "deepgemm-sm100".
const char* KernelName(EngineSpec::Kernel k);

// True for kernel=deepgemm and kernel=deepgemm-sm100 (both read weights
// requantized to power-of-two scales).
bool IsDeepgemm(EngineSpec::Kernel k);

// The quant= (and weights=) text of a format: "fp8", "fp8-ue8m0", "mxfp8",
// "nvfp4" (for the formats quant= names; "unknown" for the others).
const char* QuantName(QuantFormat f);

// Parse the forms above. INVALID_ARGUMENT naming the unknown kind or key,
// the bad value, or the impossible combination (a size < 1, first/last
// without pp > 1, ep != tp*dp for vllm, shard not dividing dp, ...).
absl::StatusOr<TrainerSpec> ParseTrainerSpec(absl::string_view text);
absl::StatusOr<EngineSpec> ParseEngineSpec(absl::string_view text);

// Canonical text of a spec (round-trips through Parse*).
std::string TrainerSpecString(const TrainerSpec& s);
std::string EngineSpecString(const EngineSpec& s);

// Layers per pipeline stage for Megatron: first/last as given and the rest
// split evenly over the middle stages (which must divide them), or, without
// first/last, as even as possible with earlier stages taking the extra
// layer. INVALID_ARGUMENT if a stage would get no layer or the sizes do not
// add up to num_layers.
absl::StatusOr<std::vector<int64_t>> PipelineStageLayers(
    int64_t num_layers, const TrainerSpec& spec);

}  // namespace refit

#endif  // REFIT_MAPPING_PARALLEL_SPEC_H_
