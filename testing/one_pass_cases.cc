// The one-pass cases (see one_pass_cases.h).
#include "testing/one_pass_cases.h"

namespace refit {
namespace testing {

const std::vector<OnePassCase>& OnePassCases() {
  static const std::vector<OnePassCase>* cases = new std::vector<OnePassCase>{
    // Tiles and blocks lie whole in every trainer record: all fuse.
    {"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8", OnePassCase::kAll},
    {"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=2,quant=fp8-ue8m0", OnePassCase::kAll},
    {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=fp8",
         OnePassCase::kAll},
    {"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8", OnePassCase::kAll},
    {"tiny-qwen3-moe-mx", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=mxfp8",
         OnePassCase::kAll},
    // FSDP's flat shards cut 128 x 128 tiles: the trainers exchange the
    // cut tiles' amaxes and write only scales; codes on pull.
    {"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=fp8", OnePassCase::kAll},
    // DeepGEMM's requantized power-of-two scales, in the pass.
    {"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8,kernel=deepgemm",
         OnePassCase::kAll},
    {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1",
         "vllm:tp=2,quant=fp8,kernel=deepgemm", OnePassCase::kAll},
    // Megatron's interleaved q/k/v (runs of 64 rows) in MXFP8 cells of
    // fewer rows; K cut at 16 per TP rank cuts o_proj's 1 x 32 blocks
    // (the block's owner writes its scale, the other half reads it).
    {"tiny-qwen3-mx", "megatron:tp=1", "vllm:tp=2,quant=mxfp8", OnePassCase::kAll},
    {"tiny-qwen3-mx", "megatron:tp=4", "vllm:tp=2,quant=mxfp8", OnePassCase::kAll},
    // Cut tiles of the DeepGEMM requantization keep two passes (its
    // codes need the first, float scale too).
    {"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=fp8,kernel=deepgemm",
         OnePassCase::kNone},
    {"tiny-qwen3-moe-mx", "megatron:tp=1", "vllm:tp=2,quant=mxfp8", OnePassCase::kAll},
    // NVFP4: the trainers exchange every parameter's global amax (per
    // expert) and write it where the engines' items read it; the 1 x 16
    // blocks lie whole in the records (FSDP's chunks cut rows) except
    // where Megatron TP 4 cuts o_proj and down_proj (K 24 and 40 a
    // rank: two passes there); FlashInfer's swizzled scales are affine
    // over cells of fewer rows.
    {"tiny-qwen3-fp4", "megatron:tp=1", "vllm:tp=2,quant=nvfp4", OnePassCase::kAll},
    {"tiny-qwen3-fp4", "megatron:tp=2", "vllm:tp=1,quant=nvfp4", OnePassCase::kAll},
    {"tiny-qwen3-fp4", "megatron:tp=4,dp=2", "vllm:tp=2,dp=2,quant=nvfp4", OnePassCase::kSome},
    {"tiny-qwen3-fp4", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=nvfp4", OnePassCase::kAll},
    {"tiny-qwen3-moe-fp4", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=nvfp4",
         OnePassCase::kAll},
    {"tiny-qwen3-moe-fp4", "megatron:tp=4,ep=4,etp=1", "vllm:tp=2,dp=2,ep=4,quant=nvfp4",
         OnePassCase::kSome},
    {"tiny-qwen3-fp4-fi", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer",
         OnePassCase::kAll},
    // vLLM's online NVFP4 recipe: its experts are quantized by the
    // trainers (the pull kernels follow ModelOpt's), pulled as codes.
    {"tiny-qwen3-moe-fp4", "megatron:tp=2,ep=2,etp=1",
         "vllm:tp=2,quant=nvfp4,recipe=vllm", OnePassCase::kNone},
    {"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=1,dp=3,ep=3,quant=nvfp4,recipe=vllm",
         OnePassCase::kNone},
    // Padded to whole tiles: q, k and v of 96 rows, o_proj's 6 scale
    // columns, weights padded to 32 rows and codes; MXFP8's flat scales.
    {"tiny-qwen3-fp4", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer",
         OnePassCase::kAll},
    {"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8,kernel=flashinfer",
         OnePassCase::kAll},
    // FlashInfer's w31 order and scale layouts.
    {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1",
         "vllm:tp=2,dp=2,ep=4,quant=fp8,kernel=flashinfer", OnePassCase::kAll}};
  return *cases;
}

}  // namespace testing
}  // namespace refit
