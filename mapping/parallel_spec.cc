#include "mapping/parallel_spec.h"

#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace refit {
namespace {

struct KeyValue {
  std::string key;
  std::string value;
};

// "kind:k=v,k=v" -> kind, pairs.
absl::Status Split(absl::string_view text, std::string* kind,
                   std::vector<KeyValue>* kvs) {
  size_t colon = text.find(':');
  *kind = std::string(text.substr(0, colon));
  if (colon == absl::string_view::npos) return absl::OkStatus();
  for (absl::string_view part :
       absl::StrSplit(text.substr(colon + 1), ',', absl::SkipEmpty())) {
    size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec \"", text, "\": \"", part, "\" is not key=value"));
    }
    kvs->push_back({std::string(part.substr(0, eq)),
                    std::string(part.substr(eq + 1))});
  }
  return absl::OkStatus();
}

// Ranks a layout may have: parallel degrees and their products (world
// sizes) beyond this are refused, before anything is sized by them.
constexpr int64_t kMaxRanks = int64_t{1} << 20;

// Parallel degrees (int32 fields) are at most kMaxRanks; other counts
// (layers, divisors) at most 2^40.
template <typename T>
absl::Status ParseInt(absl::string_view spec, const KeyValue& kv, T* out,
                      int64_t min) {
  const int64_t max =
      std::is_same<T, int32_t>::value ? kMaxRanks : (int64_t{1} << 40);
  int64_t v = 0;
  if (!absl::SimpleAtoi(kv.value, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec \"", spec, "\": ", kv.key, "=", kv.value,
                     " is not an integer in [", min, ", ", max, "]"));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status CheckWorld(absl::string_view spec, int64_t world) {
  if (world > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec \"", spec, "\": ", world, " ranks; at most ", kMaxRanks));
  }
  return absl::OkStatus();
}

absl::Status UnknownKey(absl::string_view spec, const std::string& key,
                        absl::string_view known) {
  return absl::InvalidArgumentError(absl::StrCat(
      "spec \"", spec, "\": unknown key \"", key, "\" (known: ", known, ")"));
}

}  // namespace

namespace {

constexpr KernelRow kKernelRows[] = {
    {EngineSpec::Kernel::kCheckpoint, "checkpoint", ScaleSwizzle::kRowMajor, false,
     "checkpoint layout (what Triton and CUTLASS read)"},
    // 128 x 4 tiles for MXFP8 and NVFP4 scales; FP8 block scales stay
    // row-major.
    {EngineSpec::Kernel::kFlashinfer, "flashinfer", ScaleSwizzle::kTiles128x4, false,
     "flashinfer: expert w13_weight and its block scales as [up; gate] "
     "(w31, FlashInfer CUTLASS fused MoE); NVFP4 and MXFP8 block scales "
     "in 128 x 4 tiles padded with zeros, NVFP4 dense weights padded to "
     "multiples of 32"},
    {EngineSpec::Kernel::kDeepgemm, "deepgemm", ScaleSwizzle::kRowMajor, true,
     "deepgemm: block-FP8 weights requantized to power-of-two (UE8M0) "
     "scales, scales f32 row-major (DeepGEMM on SM90)"},
    {EngineSpec::Kernel::kDeepgemmSm100, "deepgemm-sm100", ScaleSwizzle::kPackedUe8m0, true,
     "deepgemm-sm100: block-FP8 weights requantized to power-of-two (UE8M0) "
     "scales, each row's scale exponents packed four to an int32, MN-major, "
     "rows padded to a multiple of 4 (DeepGEMM on SM100)"},
};

// The quant= values, each a row of the format table.
struct QuantText {
  QuantFormat format;
  const char* name;
};
constexpr QuantText kQuantTexts[] = {
    {QuantFormat::kFp8Block, "fp8"},
    {QuantFormat::kFp8BlockUe8m0, "fp8-ue8m0"},
    {QuantFormat::kMxfp8, "mxfp8"},
    {QuantFormat::kNvfp4, "nvfp4"},
};

}  // namespace

const KernelRow& KernelTraits(EngineSpec::Kernel k) {
  for (const KernelRow& r : kKernelRows) {
    if (r.kernel == k) return r;
  }
  return kKernelRows[0];  // unreachable for a value of the enum
}

const char* KernelName(EngineSpec::Kernel k) { return KernelTraits(k).name; }

bool IsDeepgemm(EngineSpec::Kernel k) { return KernelTraits(k).requant; }

const char* QuantName(QuantFormat f) {
  for (const QuantText& q : kQuantTexts) {
    if (q.format == f) return q.name;
  }
  return "unknown";
}

namespace {

// kernel=<value>: the layouts refit writes, and the ones it refuses by
// name with the vLLM setting that avoids them.
absl::Status ParseKernel(absl::string_view spec, const std::string& v,
                         EngineSpec::Kernel* out) {
  struct Refused {
    const char* name;
    const char* why;
  };
  static constexpr Refused kRefused[] = {
      {"trtllm",
       "FlashInfer's TRTLLM fused MoE shuffles weight blocks "
       "(reorder_rows_for_gated_act_gemm, shuffle_matrix_a), which refit does "
       "not write; run vLLM with VLLM_FLASHINFER_MOE_BACKEND=throughput "
       "(CUTLASS, kernel=flashinfer) or without FlashInfer MoE"},
      {"marlin",
       "Marlin repacks weights, which refit does not write; run vLLM on a "
       "GPU with native FP8 (SM89+) or with VLLM_TEST_FORCE_FP8_MARLIN unset"},
      {"aiter",
       "ROCm AITER shuffles weights, which refit does not write; run vLLM "
       "with VLLM_ROCM_USE_AITER=0"},
  };
  for (const KernelRow& k : kKernelRows) {
    if (v == k.name) {
      *out = k.kernel;
      return absl::OkStatus();
    }
  }
  for (const Refused& r : kRefused) {
    if (v == r.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine spec \"", spec, "\": kernel=", v, ": ", r.why));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "engine spec \"", spec, "\": kernel=", v,
      " is not checkpoint, flashinfer, deepgemm or deepgemm-sm100"));
}

}  // namespace

absl::StatusOr<TrainerSpec> ParseTrainerSpec(absl::string_view text) {
  std::string kind;
  std::vector<KeyValue> kvs;
  REFIT_RETURN_IF_ERROR(Split(text, &kind, &kvs));
  TrainerSpec s;
  if (kind == "megatron") {
    s.kind = TrainerSpec::Kind::kMegatron;
    for (const KeyValue& kv : kvs) {
      if (kv.key == "tp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.tp, 1));
      } else if (kv.key == "pp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.pp, 1));
      } else if (kv.key == "dp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.dp, 1));
      } else if (kv.key == "ep") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.ep, 1));
      } else if (kv.key == "etp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.etp, 1));
      } else if (kv.key == "first") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.first, 1));
      } else if (kv.key == "last") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.last, 1));
      } else if (kv.key == "glu_chunk") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.glu_chunk, 0));
      } else if (kv.key == "vocab_div") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.vocab_divisor, 1));
      } else if (kv.key == "gpus_per_host") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.gpus_per_host, 1));
      } else if (kv.key == "gtp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.gtp, 1));
      } else if (kv.key == "egtp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.egtp, 1));
      } else if (kv.key == "weights") {
        bool known = kv.value == "model";
        for (const QuantFormat f : {QuantFormat::kMxfp8, QuantFormat::kNvfp4}) {
          if (kv.value != QuantName(f)) continue;
          s.weights = f;
          known = true;
        }
        if (!known) {
          return absl::InvalidArgumentError(absl::StrCat(
              "spec \"", text, "\": weights=", kv.value,
              " (expected model, mxfp8 or nvfp4)"));
        }
      } else if (kv.key == "amax") {
        if (kv.value != "gtp" && kv.value != "tp") {
          return absl::InvalidArgumentError(absl::StrCat(
              "spec \"", text, "\": amax=", kv.value, " (expected gtp or tp)"));
        }
        s.amax = kv.value == "tp" ? TrainerSpec::AmaxScope::kTp
                                  : TrainerSpec::AmaxScope::kGtp;
      } else if (kv.key == "experts") {
        if (kv.value != "indexed" && kv.value != "grouped") {
          return absl::InvalidArgumentError(
              absl::StrCat("spec \"", text, "\": experts=", kv.value,
                           " (expected indexed or grouped)"));
        }
        s.grouped_experts = kv.value == "grouped";
      } else {
        return UnknownKey(text, kv.key,
                          "tp, pp, dp, ep, etp, gtp, egtp, weights, amax, "
                          "first, last, experts, glu_chunk, vocab_div, "
                          "gpus_per_host");
      }
    }
    REFIT_RETURN_IF_ERROR(CheckWorld(
        text, int64_t{s.tp} * int64_t{s.gtp} * int64_t{s.pp} * int64_t{s.dp}));
    if ((s.first > 0 || s.last > 0) && s.pp < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec \"", text, "\": first/last need pp >= 2"));
    }
    int64_t stage = int64_t{s.tp} * s.gtp * s.dp;
    if (stage % (int64_t{s.expert_tp()} * s.ep * s.egtp) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec \"", text, "\": the expert mesh etp*ep*egtp = ", s.expert_tp(),
          "*", s.ep, "*", s.egtp,
          " must divide the ranks of a pipeline stage tp*gtp*dp = ", stage,
          s.etp == 0 ? " (etp defaults to tp, as in Megatron; set etp)" : ""));
    }
    if (s.amax == TrainerSpec::AmaxScope::kTp &&
        s.weights != QuantFormat::kNvfp4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec \"", text, "\": amax= applies to weights=nvfp4 only"));
    }
  } else if (kind == "fsdp") {
    s.kind = TrainerSpec::Kind::kFsdp;
    for (const KeyValue& kv : kvs) {
      if (kv.key == "dp") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.dp, 1));
      } else if (kv.key == "shard") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.shard, 1));
      } else if (kv.key == "gpus_per_host") {
        REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.gpus_per_host, 1));
      } else {
        return UnknownKey(text, kv.key, "dp, shard, gpus_per_host");
      }
    }
    if (s.shard > 0 && s.dp % s.shard != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec \"", text, "\": shard=", s.shard, " must divide dp=", s.dp));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer spec \"", text, "\": unknown trainer \"", kind,
                     "\" (known: megatron, fsdp)"));
  }
  return s;
}

absl::StatusOr<EngineSpec> ParseEngineSpec(absl::string_view text) {
  std::string kind;
  std::vector<KeyValue> kvs;
  REFIT_RETURN_IF_ERROR(Split(text, &kind, &kvs));
  if (kind != "vllm" && kind != "sglang") {
    return absl::InvalidArgumentError(
        absl::StrCat("engine spec \"", text, "\": unknown engine \"", kind,
                     "\" (known: vllm, sglang)"));
  }
  EngineSpec s;
  s.kind = kind == "vllm" ? EngineSpec::Kind::kVllm : EngineSpec::Kind::kSglang;
  bool recipe_given = false;
  for (const KeyValue& kv : kvs) {
    if (kv.key == "tp") {
      REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.tp, 1));
    } else if (kv.key == "dp") {
      REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.dp, 1));
    } else if (kv.key == "ep") {
      REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.ep, 1));
    } else if (kv.key == "vocab_pad") {
      REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.vocab_pad, 1));
    } else if (kv.key == "gpus_per_host") {
      REFIT_RETURN_IF_ERROR(ParseInt(text, kv, &s.gpus_per_host, 1));
    } else if (kv.key == "quant") {
      bool known = kv.value == "none";
      for (const QuantText& q : kQuantTexts) {
        if (kv.value != q.name) continue;
        s.quant = q.format;
        known = true;
      }
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine spec \"", text, "\": quant=", kv.value,
            " is not none, fp8, fp8-ue8m0, mxfp8 or nvfp4"));
      }
    } else if (kv.key == "kernel") {
      REFIT_RETURN_IF_ERROR(ParseKernel(text, kv.value, &s.kernel));
    } else if (kv.key == "recipe") {
      if (absl::StrContains(kv.value, "4over6")) {
        // FlashInfer's 4over6 (FLASHINFER_NVFP4_4OVER6=1, read by vLLM's
        // online NVFP4 through current_nvfp4_4over6_config).
        return absl::InvalidArgumentError(absl::StrCat(
            "engine spec \"", text, "\": recipe=", kv.value, ": FlashInfer's 4over6 "
            "(each block's maximum 4 or 6, a 256 or 448 global bound) is not written; "
            "unset FLASHINFER_NVFP4_4OVER6 on the engine and use recipe=vllm"));
      }
      if (kv.value != "modelopt" && kv.value != "vllm") {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine spec \"", text, "\": recipe=", kv.value, " is not modelopt or vllm"));
      }
      s.recipe = kv.value == "vllm" ? EngineSpec::Recipe::kVllm : EngineSpec::Recipe::kModelopt;
      recipe_given = true;
    } else if (kv.key == "placement") {
      if (kv.value != "linear" && kv.value != "round_robin") {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine spec \"", text, "\": placement=", kv.value,
            " is not linear or round_robin"));
      }
      s.round_robin = kv.value == "round_robin";
    } else {
      return UnknownKey(text, kv.key,
                        "tp, dp, ep, placement, vocab_pad, gpus_per_host, quant, "
                        "kernel, recipe");
    }
  }
  if (s.round_robin && (s.kind != EngineSpec::Kind::kVllm || s.ep == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text,
        "\": placement=round_robin is vLLM's expert placement under expert "
        "parallelism: it needs vllm with ep=tp*dp"));
  }
  REFIT_RETURN_IF_ERROR(CheckWorld(text, int64_t{s.tp} * int64_t{s.dp}));
  // SGLang loads BF16 experts as [up; gate] for FlashInfer CUTLASS MoE
  // (FusedMoE._load_w13, load_up_proj_weight_first): kernel=flashinfer.
  // Its FlashInfer CUTLASS MoE reads FP8 experts with per-tensor scales
  // only, and its UE8M0 requantization (DeepGEMM on Blackwell) packs the
  // scales into int32, neither of which refit writes (docs/engines.md).
  if (s.kind == EngineSpec::Kind::kSglang && IsDeepgemm(s.kernel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": kernel=", KernelName(s.kernel), ": SGLang "
        "requantizes to UE8M0 only for DeepGEMM on Blackwell (transform_scale_ue8m0) "
        "and refit writes vLLM's parameters for it only; on SM90 SGLang's DeepGEMM "
        "reads the checkpoint's float scales: use quant=fp8 without kernel=, or set "
        "SGLANG_ENABLE_JIT_DEEPGEMM=0"));
  }
  if (s.kind == EngineSpec::Kind::kSglang && s.kernel == EngineSpec::Kernel::kFlashinfer &&
      s.quant.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": kernel=flashinfer with quant=: SGLang's "
        "FlashInfer CUTLASS MoE reads FP8 experts with per-tensor scales only, "
        "which refit does not write; run SGLang with --moe-runner-backend "
        "triton for block FP8"));
  }
  if (IsDeepgemm(s.kernel) && s.quant == QuantFormat::kFp8BlockUe8m0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": kernel=", KernelName(s.kernel), " makes its own "
        "UE8M0 scales (vLLM requantizes the float-scale checkpoint); use quant=fp8, "
        "not quant=fp8-ue8m0"));
  }
  if (s.quant == QuantFormat::kMxfp8 && IsDeepgemm(s.kernel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": quant=mxfp8 with kernel=", KernelName(s.kernel),
        ": DeepGEMM reads block FP8; MXFP8 engines take kernel=flashinfer (swizzled F8_128x4 scales, "
        "swizzle_mxfp8_scale) or the checkpoint layout ([N, K/32] uint8)"));
  }
  if (s.quant == QuantFormat::kNvfp4 && IsDeepgemm(s.kernel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": quant=nvfp4 with kernel=", KernelName(s.kernel),
        ": DeepGEMM reads block FP8; NVFP4 engines take kernel=flashinfer (swizzled scales, experts' "
        "w13 as [up; gate]) or the checkpoint layout"));
  }
  if (s.quant == QuantFormat::kNvfp4 && s.kind != EngineSpec::Kind::kVllm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": quant=nvfp4 follows vLLM's ModelOpt NVFP4 "
        "parameters after loading; SGLang's are not written"));
  }
  if (recipe_given && s.quant != QuantFormat::kNvfp4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": recipe= says which recipe made NVFP4 bytes; it "
        "needs quant=nvfp4"));
  }
  if (s.recipe == EngineSpec::Recipe::kVllm && s.kernel == EngineSpec::Kernel::kFlashinfer) {
    // online/nvfp4.py at 0136201: select_nvfp4_moe_backend with
    // kNvfp4DynamicToken activations finds FlashInfer TRTLLM or CuteDSL
    // experts only (FlashInferExperts, the CUTLASS layout, takes
    // kNvfp4Dynamic: flashinfer_cutlass_moe.py at 03063c0).
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": recipe=vllm with kernel=flashinfer: vLLM's online "
        "NVFP4 experts (per-token activations) run FlashInfer TRTLLM or CuteDSL, whose "
        "shuffled layouts refit does not write, not the FlashInfer CUTLASS layout "
        "kernel=flashinfer writes; serve a ModelOpt NVFP4 checkpoint (recipe=modelopt)"));
  }
  if (s.quant == QuantFormat::kMxfp8 && s.kind != EngineSpec::Kind::kVllm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": quant=mxfp8 follows vLLM's online MXFP8 "
        "method (quantization=\"mxfp8\"); SGLang's is not written"));
  }
  if (s.kind == EngineSpec::Kind::kSglang) {
    if (s.ep > 0 && s.tp % s.ep != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine spec \"", text, "\": ep=", s.ep, " must divide tp=", s.tp,
          " (SGLang's expert parallelism splits each TP group)"));
    }
    return s;
  }
  if (s.ep > 0 && s.ep != s.tp * s.dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec \"", text, "\": ep=", s.ep,
        " must equal tp*dp = ", s.tp * s.dp,
        " (vLLM's expert parallelism spans all TP x DP ranks)"));
  }
  return s;
}

std::string TrainerSpecString(const TrainerSpec& s) {
  if (s.kind == TrainerSpec::Kind::kFsdp) {
    std::string out = absl::StrCat("fsdp:dp=", s.dp);
    if (s.shard > 0) absl::StrAppend(&out, ",shard=", s.shard);
    if (s.gpus_per_host > 0) absl::StrAppend(&out, ",gpus_per_host=", s.gpus_per_host);
    return out;
  }
  std::string out = absl::StrCat("megatron:tp=", s.tp, ",pp=", s.pp, ",dp=",
                                 s.dp, ",ep=", s.ep, ",etp=", s.expert_tp());
  if (s.first > 0) absl::StrAppend(&out, ",first=", s.first);
  if (s.last > 0) absl::StrAppend(&out, ",last=", s.last);
  absl::StrAppend(&out, ",experts=", s.grouped_experts ? "grouped" : "indexed");
  if (s.glu_chunk > 0) absl::StrAppend(&out, ",glu_chunk=", s.glu_chunk);
  absl::StrAppend(&out, ",vocab_div=", s.vocab_divisor);
  if (s.gtp > 1) absl::StrAppend(&out, ",gtp=", s.gtp);
  if (s.egtp > 1) absl::StrAppend(&out, ",egtp=", s.egtp);
  if (s.weights.has_value()) absl::StrAppend(&out, ",weights=", QuantName(*s.weights));
  if (s.amax == TrainerSpec::AmaxScope::kTp) absl::StrAppend(&out, ",amax=tp");
  if (s.gpus_per_host > 0) absl::StrAppend(&out, ",gpus_per_host=", s.gpus_per_host);
  return out;
}

std::string EngineSpecString(const EngineSpec& s) {
  std::string out =
      absl::StrCat(s.kind == EngineSpec::Kind::kVllm ? "vllm" : "sglang",
                   ":tp=", s.tp, ",dp=", s.dp);
  if (s.ep > 0) absl::StrAppend(&out, ",ep=", s.ep);
  if (s.round_robin) absl::StrAppend(&out, ",placement=round_robin");
  if (s.vocab_pad != 64) absl::StrAppend(&out, ",vocab_pad=", s.vocab_pad);
  if (s.gpus_per_host > 0) absl::StrAppend(&out, ",gpus_per_host=", s.gpus_per_host);
  if (s.quant.has_value()) absl::StrAppend(&out, ",quant=", QuantName(*s.quant));
  if (s.recipe == EngineSpec::Recipe::kVllm) absl::StrAppend(&out, ",recipe=vllm");
  if (s.kernel != EngineSpec::Kernel::kCheckpoint) {
    absl::StrAppend(&out, ",kernel=", KernelName(s.kernel));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> PipelineStageLayers(
    int64_t num_layers, const TrainerSpec& spec) {
  const int64_t p = spec.kind == TrainerSpec::Kind::kMegatron ? spec.pp : 1;
  std::vector<int64_t> out(p, 0);
  if (p == 1) {
    out[0] = num_layers;
    return out;
  }
  if (spec.first > 0 || spec.last > 0) {
    int64_t first = spec.first, last = spec.last;
    int64_t middle_stages = p - (first > 0) - (last > 0);
    int64_t rest = num_layers - first - last;
    if (rest < 0 || (middle_stages == 0 && rest != 0) ||
        (middle_stages > 0 && (rest % middle_stages != 0 || rest == 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline: first=", first, " last=", last, " leave ", rest,
          " of ", num_layers, " layers, which do not split evenly over ",
          middle_stages, " other stage(s) of pp=", p));
    }
    for (int64_t s = 0; s < p; ++s) {
      out[s] = middle_stages > 0 ? rest / middle_stages : 0;
    }
    if (first > 0) out[0] = first;
    if (last > 0) out[p - 1] = last;
    return out;
  }
  if (num_layers < p) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: pp=", p, " stages for only ", num_layers,
                     " layers"));
  }
  for (int64_t s = 0; s < p; ++s) {
    out[s] = num_layers / p + (s < num_layers % p ? 1 : 0);
  }
  return out;
}

}  // namespace refit
