// BF16 trainers into FP8 (and f32 -exp) engines through the real planner:
// the reference copy (which converts with the reference quantizer) and the
// executor over the in-process transport (which converts with the data
// plane's Converter, cut-tile amax exchange included) both leave every
// engine element equal to what CheckPattern expects of the trainer's
// pattern.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/executor.h"
#include "exec/transport/inproc_transport.h"
#include "exec/convert/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/inproc_ranks.h"
#include "testing/planned_case.h"
#include "testing/reference_convert.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

struct Case {
  const char* model;
  const char* trainer;
  const char* engine;
};

using testing::RunAllRanksInProc;

class ConvertedPatternsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertedPatternsTest, EngineHoldsTheConvertedPattern) {
  const Case& c = GetParam();
  testing::PlannedCase pc;
  const absl::Status planned = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
  ASSERT_TRUE(planned.ok()) << planned;
  auto& [model, src, dst, plan] = pc;
  ASSERT_FALSE(plan->conversions.empty());
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 3};
  po.source_dtypes = &source;
  // The reference.
  {
    OwnedBuffers s = AllocateBuffers(src->layout);
    OwnedBuffers d = AllocateBuffers(plan->dst);
    FillPattern(src->layout, s.ptrs, po);
    ASSERT_TRUE(ReferenceCopy(*plan, s.ptrs, d.ptrs).ok());
    absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
    EXPECT_TRUE(st.ok()) << "reference copy: " << st.message().substr(0, 600);
  }
  // The data plane: one thread per rank.
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, po);
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/true);
  const int32_t ws = plan->src.world_size, wd = plan->dst.world_size;
  for (int32_t g = 0; g < ws + wd; ++g) ASSERT_TRUE(status[g].ok()) << g << ": " << status[g];
  absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
  EXPECT_TRUE(st.ok()) << "executor: " << st.message().substr(0, 600);
}

// A NaN in a quantized weight fails the trainer rank that holds it, naming
// the tensor, the element and the rank, and nothing is quantized from it.
TEST(ConvertedPlansTest, NonFiniteWeightFailsNamingTensorAndRank) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-moe-b128");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*model, *ParseTrainerSpec("fsdp:dp=2"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=fp8"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, {-1, 1});
  // A NaN (bf16 0x7FC0) in the o_proj rows trainer rank 1 holds.
  const std::string name = "model.layers.1.self_attn.o_proj.weight";
  bool planted = false;
  for (const Record& r : src->layout.records) {
    if (src->layout.tensors[r.tensor].name == name && r.rank == 1) {
      uint8_t* p = s.ptrs[r.buffer] + r.byte_offset;
      p[0] = 0xC0;
      p[1] = 0x7F;
      planted = true;
    }
  }
  ASSERT_TRUE(planted);
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/false);
  const int32_t ws = plan->src.world_size;
  EXPECT_EQ(status[1].code(), absl::StatusCode::kInvalidArgument) << status[1];
  EXPECT_THAT(std::string(status[1].message()),
              ::testing::HasSubstr("tensor " + name + ", trainer rank 1"));
  EXPECT_THAT(std::string(status[1].message()), ::testing::HasSubstr("non-finite value"));
  EXPECT_FALSE(status[ws].ok()) << "the engine must not complete the round";
}

// MXFP8 under Megatron TP 4: down_proj's K (192) is cut at 48, 96, 144, so
// blocks [32, 64) and [128, 160) of every row are shared by two trainer
// ranks; the plan exchanges their amaxes, the engine holds vLLM's uint8
// weight_scale [64, 6], and a single wrong scale byte fails the check.
TEST(ConvertedPlansTest, Mxfp8CutBlocksGetOneScaleAndEveryByteIsChecked) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-mx");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src =
      BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=4"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=mxfp8"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->cut_tiles.empty());
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  int32_t sbuf = -1;
  for (size_t b = 0; b < plan->dst.buffers.size(); ++b) {
    if (plan->dst.buffers[b].name == scale) sbuf = static_cast<int32_t>(b);
  }
  ASSERT_GE(sbuf, 0);
  EXPECT_EQ(plan->dst.buffers[sbuf].byte_size, 64 * 6);
  for (const TensorSpec& t : plan->dst.tensors) {
    if (t.name == scale) {
      EXPECT_EQ(t.dtype, DType::kU8);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 6}));
    }
    // Norms, embeddings and lm_head stay bf16, as under vLLM's MXFP8 method.
    if (t.name == "lm_head.weight" || t.name == "model.embed_tokens.weight" ||
        t.name == "model.norm.weight") {
      EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
    }
  }
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 5};
  po.source_dtypes = &source;
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, po);
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/true);
  for (const absl::Status& st : status) ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(CheckPattern(plan->dst, d.ptrs, po).ok());
  d.ptrs[sbuf][7] ^= 1;
  absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr(scale));
}

// An engine spec that model `model` cannot be laid out for, and what the
// refusal must say.
struct RefusedEngine {
  const char* model;
  const char* engine;
  const char* says;
};

// Laying out `model` for `engine` fails with INVALID_ARGUMENT saying `says`.
void ExpectEngineRefused(const char* model, const char* engine, const char* says) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model);
  ASSERT_TRUE(config.ok()) << model;
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*config, *ParseEngineSpec(engine));
  ASSERT_FALSE(dst.ok()) << model << " " << engine;
  EXPECT_EQ(dst.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dst.status().message()), ::testing::HasSubstr(says)) << dst.status();
}

// Engines vLLM's MXFP8 method refuses are refused by name: K not a
// multiple of 32 (whole or per TP rank), and an FP8 model.
TEST(ConvertedPlansTest, Mxfp8RefusesWhatVllmRefuses) {
  const RefusedEngine cases[] = {
      RefusedEngine{"tiny-qwen3", "vllm:tp=1,quant=mxfp8", "multiple of 32"},
      RefusedEngine{"tiny-qwen3-mx", "vllm:tp=4,quant=mxfp8", "1x32 weight_scale block"},
      RefusedEngine{"tiny-qwen3-moe-fp8", "vllm:tp=1,quant=mxfp8", "already FP8"},
  };
  for (const RefusedEngine& b : cases) ExpectEngineRefused(b.model, b.engine, b.says);
}

// Returns the index of buffer `name` of engine rank `rank` in `side`, -1 if
// none.
int32_t BufferIndex(const SideLayout& side, const std::string& name, int32_t rank) {
  for (size_t b = 0; b < side.buffers.size(); ++b) {
    if (side.buffers[b].name == name && side.buffers[b].rank == rank) {
      return static_cast<int32_t>(b);
    }
  }
  return -1;
}

// NVFP4 under Megatron TP 4 into one vLLM rank: o_proj's K (96) is cut at
// 24, 48, 72, so 16-blocks are shared by two trainer ranks; qkv_proj's
// global scale is max |q, k, v| / 2688 over all four ranks' rows; the
// engine holds vLLM's names, shapes and dtypes, and a flipped byte in the
// codes, the block scales or the global scale fails the check naming it.
TEST(ConvertedPlansTest, Nvfp4CutBlocksSharedGlobalScaleAndEveryByteIsChecked) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-fp4");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src =
      BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=4"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=nvfp4"));
  ASSERT_TRUE(src.ok() && dst.ok()) << src.status() << dst.status();
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string attn = "model.layers.0.self_attn.";
  std::map<std::string, const TensorSpec*> t;
  for (const TensorSpec& x : plan->dst.tensors) t[x.name] = &x;
  ASSERT_TRUE(t.count(attn + "q_proj.weight") && t.count(attn + "q_proj.weight_scale") &&
              t.count(attn + "q_proj.weight_scale_2"));
  EXPECT_EQ(t[attn + "q_proj.weight"]->dtype, DType::kU8);
  EXPECT_EQ(t[attn + "q_proj.weight"]->shape, (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(t[attn + "q_proj.weight_scale"]->dtype, DType::kF8E4M3);
  EXPECT_EQ(t[attn + "q_proj.weight_scale"]->shape, (std::vector<int64_t>{96, 4}));
  EXPECT_EQ(t[attn + "q_proj.weight_scale_2"]->shape, std::vector<int64_t>{});
  EXPECT_FALSE(t.count(attn + "k_proj.weight_scale_2"));  // shared with q
  EXPECT_EQ(t["lm_head.weight"]->dtype, DType::kBF16);
  EXPECT_EQ(t["model.embed_tokens.weight"]->dtype, DType::kBF16);
  // The exchanges: o_proj's cut blocks, and qkv_proj's global over 4 ranks.
  int32_t o_proj = -1, qkv_global = -1;
  for (size_t i = 0; i < plan->src.tensors.size(); ++i) {
    if (plan->src.tensors[i].name == attn + "o_proj.weight") o_proj = i;
    if (plan->src.tensors[i].name == attn + "q_proj.weight_scale_2") qkv_global = i;
  }
  bool cut = false, global4 = false;
  for (const CutTileGroup& g : plan->cut_tiles) {
    cut |= g.tensor == o_proj;
    global4 |= g.tensor == qkv_global && g.ranks.size() == 4;
  }
  EXPECT_TRUE(cut);
  EXPECT_TRUE(global4);
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 9};
  po.source_dtypes = &source;
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, po);
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/true);
  for (const absl::Status& st : status) ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(CheckPattern(plan->dst, d.ptrs, po).ok());
  // The global scale: amax over q, k, v (the trainer's bf16 pattern) / 2688.
  float amax = 0;
  for (const char* part : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) {
    const uint64_t h = NameHash(attn + part);
    for (int64_t i = 0; i < 96 * 64; ++i) {
      const uint64_t w = testing::FiniteWord(DType::kBF16, PatternWord(h, i, po.seed));
      char b[8];
      std::memcpy(b, &w, 8);
      amax = std::max(amax, std::fabs(LoadAsF32(DType::kBF16, b)));
    }
  }
  const int32_t gbuf = BufferIndex(plan->dst, attn + "qkv_proj.weight_global_scale", 0);
  ASSERT_GE(gbuf, 0);
  EXPECT_EQ(plan->dst.buffers[gbuf].byte_size, 4);
  float g;
  std::memcpy(&g, d.ptrs[gbuf], 4);
  EXPECT_EQ(g, amax * (1.0f / 2688.0f));  // torch's CUDA amax / (6 * 448)
  for (const std::string& name : {attn + "qkv_proj.weight_global_scale",
                                  attn + "o_proj.weight_scale", attn + "o_proj.weight"}) {
    const int32_t b = BufferIndex(plan->dst, name, 0);
    ASSERT_GE(b, 0) << name;
    d.ptrs[b][3] ^= 1;
    absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
    EXPECT_FALSE(st.ok()) << name;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr(name.substr(attn.size())));
    d.ptrs[b][3] ^= 1;
  }
}

// A parameter whose every value is zero has no NVFP4 global scale
// (ModelOpt divides by amax / 2688): the trainer ranks holding it fail,
// naming the tensor, and the engine does not complete the round.
TEST(ConvertedPlansTest, Nvfp4AllZeroParameterFailsNamingIt) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-fp4");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*model, *ParseTrainerSpec("fsdp:dp=2"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=nvfp4"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, {-1, 1});
  const std::string name = "model.layers.1.self_attn.o_proj.weight";
  for (const Record& r : src->layout.records) {
    if (src->layout.tensors[r.tensor].name == name) {
      std::memset(s.ptrs[r.buffer], 0, src->layout.buffers[r.buffer].byte_size);
    }
  }
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/false);
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument) << status[0];
  EXPECT_THAT(std::string(status[0].message()), ::testing::HasSubstr("tensor " + name));
  EXPECT_THAT(std::string(status[0].message()), ::testing::HasSubstr("is zero"));
  EXPECT_FALSE(status[plan->src.world_size].ok());
}

// A real MoE model plans into NVFP4 under EP: every engine rank gets one
// global scale per parameter (qkv_proj, o_proj, w13, w2 of each layer), and
// the plan survives the codec (it once read a record after the scale
// records had moved the vector).
TEST(ConvertedPlansTest, Nvfp4PlansQwen3MoeUnderExpertParallelism) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("qwen3-30b-a3b");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src =
      BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=4,ep=4,etp=1"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=2,dp=2,ep=4,quant=nvfp4"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  int globals = 0;
  for (const BufferSpec& b : plan->dst.buffers) {
    if (b.rank == 3 && (absl::EndsWith(b.name, "_global_scale") ||
                        absl::EndsWith(b.name, "_scale_2"))) {
      ++globals;
    }
  }
  EXPECT_EQ(globals, 4 * model->num_layers);
  absl::StatusOr<Plan> back = FromProto(ToProto(*plan));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->conversions.size(), plan->conversions.size());
}

// vLLM's swizzle of an [m, k] scale matrix (swizzle_blockscale,
// swizzle_mxfp8_scale), stated as vLLM writes it: zero-padded to [mp, kp]
// (128 rows, 4 columns), viewed as [mp/128, 4, 32, kp/4, 4] and dims 1 and
// 3 swapped. Padding bytes are `pad`.
std::vector<uint8_t> VllmSwizzle(const std::vector<uint8_t>& logical, int64_t m, int64_t k,
                                 uint8_t pad) {
  const int64_t mp = (m + 127) / 128 * 128, kp = (k + 3) / 4 * 4;
  std::vector<uint8_t> padded(mp * kp, pad), out(mp * kp);
  for (int64_t r = 0; r < m; ++r) {
    std::copy_n(logical.begin() + r * k, k, padded.begin() + r * kp);
  }
  for (int64_t a = 0; a < mp / 128; ++a) {
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t e = 0; e < 32; ++e) {
        for (int64_t f = 0; f < kp / 4; ++f) {
          for (int64_t g = 0; g < 4; ++g) {
            out[(((a * (kp / 4) + f) * 32 + e) * 4 + b) * 4 + g] =
                padded[(a * 128 + b * 32 + e) * kp + f * 4 + g];
          }
        }
      }
    }
  }
  return out;
}

// The bytes engine tensor `name` holds for the pattern (NVFP4 codes or
// scales, or MXFP8 E8M0 scales), row-major; `*cols` its last extent.
std::vector<uint8_t> ExpectedTensor(const Plan& plan, const std::map<std::string, DType>& source,
                                    uint64_t seed, const std::string& name, int64_t* cols) {
  const TensorSpec* t = nullptr;
  const TensorSpec* w = nullptr;
  const std::string weight = name.substr(0, name.rfind("_scale"));
  for (const TensorSpec& x : plan.dst.tensors) {
    if (x.name == name) t = &x;
    if (x.name == weight) w = &x;
  }
  std::vector<uint8_t> bytes;
  if (t == nullptr) return bytes;
  *cols = t->shape.back();
  if (!testing::ExpectedNvfp4(plan.dst, *t, source, seed, &bytes) && w != nullptr) {
    auto sd = source.find(weight);
    if (sd == source.end()) return bytes;
    bytes = testing::ExpectedConverted(*t, sd->second, w, seed, 128);
  }
  return bytes;
}

struct SwizzledBuffer {
  std::string buffer;
  std::vector<std::string> parts;  // the tensors stacked in its rows, in order
  bool row_parallel = false;       // vLLM shards its columns, else its rows
};

// Engine TP rank 0's share of an [m, k] row-major matrix: the first 1/tp
// of its rows, or of its columns when `row_parallel`; `*k` becomes the
// share's columns.
std::vector<uint8_t> RankZeroShare(const std::vector<uint8_t>& whole, int64_t* k, int tp,
                                   bool row_parallel) {
  const int64_t m = static_cast<int64_t>(whole.size()) / *k;
  if (!row_parallel) return std::vector<uint8_t>(whole.begin(), whole.begin() + m / tp * *k);
  const int64_t ks = *k / tp;
  std::vector<uint8_t> out;
  for (int64_t r = 0; r < m; ++r) {
    out.insert(out.end(), whole.begin() + r * *k, whole.begin() + r * *k + ks);
  }
  *k = ks;
  return out;
}

// kernel=flashinfer: every byte of the listed dense weight_scale buffers of
// engine rank 0 equals vLLM's swizzle of the reference scales, padding
// tiles (rows to 128, columns to 4) untouched; with NVFP4, the weights sit
// in rows padded to 32 codes, padding untouched. Tiny models' parts are
// 96 or 144 rows and 3, 6 or 10 scale columns: no part fills whole tiles.
void ExpectVllmSwizzle(const char* model_name, const char* trainer, const char* engine,
                       const std::vector<SwizzledBuffer>& buffers) {
  const bool nvfp4 = absl::StrContains(engine, "quant=nvfp4");
  const int tp = absl::StrContains(engine, "tp=2") ? 2 : 1;
  SCOPED_TRACE(absl::StrCat(model_name, " ", trainer, " -> ", engine));
  absl::StatusOr<ModelConfig> model = LoadModelConfig(model_name);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*model, *ParseTrainerSpec(trainer));
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*model, *ParseEngineSpec(engine));
  ASSERT_TRUE(src.ok() && dst.ok()) << src.status() << dst.status();
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 4};
  po.source_dtypes = &source;
  constexpr uint8_t kUntouched = 0x5A;
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst, kUntouched);
  FillPattern(src->layout, s.ptrs, po);
  const std::vector<absl::Status> status = RunAllRanksInProc(*plan, s, d, /*slices=*/true);
  for (const absl::Status& st : status) ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(CheckPattern(plan->dst, d.ptrs, po).ok());
  for (const SwizzledBuffer& p : buffers) {
    std::vector<uint8_t> logical, codes;
    int64_t k = 0, kb = 0;
    for (const std::string& part : p.parts) {
      std::vector<uint8_t> bytes = ExpectedTensor(*plan, source, po.seed, part, &k);
      ASSERT_FALSE(bytes.empty()) << part;
      bytes = RankZeroShare(bytes, &k, tp, p.row_parallel);
      logical.insert(logical.end(), bytes.begin(), bytes.end());
      if (!nvfp4) continue;
      const std::string w = part.substr(0, part.rfind("_scale"));
      std::vector<uint8_t> c = ExpectedTensor(*plan, source, po.seed, w, &kb);
      ASSERT_FALSE(c.empty()) << w;
      c = RankZeroShare(c, &kb, tp, p.row_parallel);
      codes.insert(codes.end(), c.begin(), c.end());
    }
    const int64_t m = static_cast<int64_t>(logical.size()) / k;
    const std::vector<uint8_t> want = VllmSwizzle(logical, m, k, kUntouched);
    const int32_t b = BufferIndex(plan->dst, p.buffer, 0);
    ASSERT_GE(b, 0) << p.buffer;
    ASSERT_EQ(plan->dst.buffers[b].byte_size, static_cast<int64_t>(want.size()));
    EXPECT_EQ(std::vector<uint8_t>(d.ptrs[b], d.ptrs[b] + want.size()), want) << p.buffer;
    if (!nvfp4) continue;  // MXFP8: weights as in the checkpoint layout
    const std::string wbuf = p.buffer.substr(0, p.buffer.rfind("_scale"));
    const int32_t wb = BufferIndex(plan->dst, wbuf, 0);
    ASSERT_GE(wb, 0) << wbuf;
    ASSERT_EQ(static_cast<int64_t>(codes.size()), m * kb) << wbuf;
    const int64_t np = (m + 31) / 32 * 32, kbp = (2 * kb + 31) / 32 * 16;
    std::vector<uint8_t> padded(np * kbp, kUntouched);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(codes.begin() + r * kb, kb, padded.begin() + r * kbp);
    }
    ASSERT_EQ(plan->dst.buffers[wb].byte_size, static_cast<int64_t>(padded.size())) << wbuf;
    EXPECT_EQ(std::vector<uint8_t>(d.ptrs[wb], d.ptrs[wb] + padded.size()), padded) << wbuf;
  }
}

TEST(ConvertedPlansTest, FlashinferScalesAreVllmsSwizzlePaddedToWholeTiles) {
  const std::string attn = "model.layers.1.self_attn.";
  const std::string mlp = "model.layers.0.mlp.";
  const SwizzledBuffer o{attn + "o_proj.weight_scale", {attn + "o_proj.weight_scale"}, true};
  const SwizzledBuffer qkv{attn + "qkv_proj.weight_scale",
                           {attn + "q_proj.weight_scale", attn + "k_proj.weight_scale",
                            attn + "v_proj.weight_scale"}};
  const SwizzledBuffer gate_up{mlp + "gate_up_proj.weight_scale",
                               {mlp + "gate_proj.weight_scale", mlp + "up_proj.weight_scale"}};
  const SwizzledBuffer down{mlp + "down_proj.weight_scale", {mlp + "down_proj.weight_scale"},
                            true};
  // Whole tiles (the model made for it), then parts of tiles.
  ExpectVllmSwizzle("tiny-qwen3-fp4-fi", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer",
                    {o, qkv});
  ExpectVllmSwizzle("tiny-qwen3-fp4", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer",
                    {o, qkv, gate_up, down});
  // Per rank: qkv 144 rows (weights padded to 160), o_proj K 48 (codes
  // padded to 64, scale columns 3 to 4).
  ExpectVllmSwizzle("tiny-qwen3-fp4", "fsdp:dp=3", "vllm:tp=2,quant=nvfp4,kernel=flashinfer",
                    {o, qkv, gate_up, down});
  // MXFP8 linears: flat [Mp * Kp] E8M0 scales (FlashInferCutlassMxfp8LinearKernel).
  ExpectVllmSwizzle("tiny-qwen3-mx", "megatron:tp=2", "vllm:tp=2,quant=mxfp8,kernel=flashinfer",
                    {o, qkv, gate_up, down});
}

// Engines vLLM's NVFP4 method refuses are refused by name: K not a
// multiple of 16 (whole or per TP rank), an FP8 model, kernel=deepgemm;
// and MXFP8 experts with kernel=flashinfer.
TEST(ConvertedPlansTest, Nvfp4RefusesWhatIsNotWritten) {
  const RefusedEngine cases[] = {
      RefusedEngine{"tiny-qwen3", "vllm:tp=1,quant=nvfp4", "multiple of 16"},
      RefusedEngine{"tiny-qwen3-fp4", "vllm:tp=4,quant=nvfp4", "1x16 weight_scale block"},
      RefusedEngine{"tiny-qwen3-moe-fp8", "vllm:tp=1,quant=nvfp4", "already FP8"},
  };
  for (const RefusedEngine& b : cases) ExpectEngineRefused(b.model, b.engine, b.says);
  absl::StatusOr<EngineSpec> dg = ParseEngineSpec("vllm:tp=1,quant=nvfp4,kernel=deepgemm");
  ASSERT_FALSE(dg.ok());
  EXPECT_THAT(std::string(dg.status().message()), ::testing::HasSubstr("deepgemm"));
  // MXFP8 experts with kernel=flashinfer go to a MoE backend refit does not write.
  ExpectEngineRefused("tiny-qwen3-moe-mx", "vllm:tp=1,quant=mxfp8,kernel=flashinfer",
                      "FlashInfer TRTLLM");
  // vLLM's online NVFP4 quantizes routed experts only, and runs them in
  // FlashInfer TRTLLM or CuteDSL layouts: a dense model, kernel=flashinfer
  // and a recipe without quant=nvfp4 are refused, naming what avoids it.
  ExpectEngineRefused("tiny-qwen3-fp4", "vllm:tp=1,quant=nvfp4,recipe=vllm", "recipe=modelopt");
  for (const char* spec : {"vllm:tp=1,quant=nvfp4,recipe=vllm,kernel=flashinfer",
                           "vllm:tp=1,quant=mxfp8,recipe=vllm", "vllm:tp=1,recipe=modelopt",
                           "vllm:tp=1,quant=nvfp4,recipe=4over6"}) {
    absl::StatusOr<EngineSpec> e = ParseEngineSpec(spec);
    ASSERT_FALSE(e.ok()) << spec;
    EXPECT_THAT(std::string(e.status().message()), ::testing::HasSubstr("recipe")) << spec;
  }
  absl::StatusOr<EngineSpec> fi =
      ParseEngineSpec("vllm:tp=1,quant=nvfp4,recipe=vllm,kernel=flashinfer");
  EXPECT_THAT(std::string(fi.status().message()), ::testing::HasSubstr("TRTLLM or CuteDSL"));
}

// recipe=vllm: the routed experts are NVFP4 of vLLM's recipe (the plan's
// conversions say so), the other linears stay BF16, and the expected
// bytes differ from ModelOpt's (so the cases above tell the recipes apart).
TEST(ConvertedPlansTest, Nvfp4RecipeVllmQuantizesExpertsOnly) {
  testing::PlannedCase vllm, modelopt;
  ASSERT_TRUE(testing::PlanCase("tiny-qwen3-moe-fp4", "megatron:tp=1",
                                "vllm:tp=1,quant=nvfp4,recipe=vllm", &vllm).ok());
  ASSERT_TRUE(testing::PlanCase("tiny-qwen3-moe-fp4", "megatron:tp=1",
                                "vllm:tp=1,quant=nvfp4", &modelopt).ok());
  ASSERT_FALSE(vllm.plan->conversions.empty());
  for (const Conversion& c : vllm.plan->conversions) {
    EXPECT_EQ(c.recipe, Nvfp4Recipe::kVllm) << vllm.plan->src.tensors[c.from.tensor].name;
    EXPECT_TRUE(vllm.plan->src.tensors[c.from.tensor].stacked);
  }
  for (const Conversion& c : modelopt.plan->conversions) {
    EXPECT_EQ(c.recipe, Nvfp4Recipe::kModelopt);
  }
  const SideLayout& engine = vllm.dst->layout;
  const std::map<std::string, DType> source = SourceDTypes(vllm.src->layout);
  int differ = 0, experts = 0;
  for (const TensorSpec& t : engine.tensors) {
    if (absl::StrContains(t.name, "q_proj.weight")) EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
    std::vector<uint8_t> a, b;
    if (!testing::ExpectedNvfp4(engine, t, source, 3, &a)) continue;
    ++experts;
    for (const TensorSpec& m : modelopt.dst->layout.tensors) {
      if (m.name == t.name) ASSERT_TRUE(testing::ExpectedNvfp4(modelopt.dst->layout, m, source, 3, &b));
    }
    differ += a != b;
  }
  EXPECT_GT(experts, 0);
  EXPECT_GT(differ, 0) << "the recipes' expected bytes are equal";
}

INSTANTIATE_TEST_SUITE_P(
    Models, ConvertedPatternsTest,
    ::testing::Values(
        Case{"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=fp8"},
        Case{"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=fp8-ue8m0"},
        Case{"tiny-deepseek-v3-b128", "fsdp:dp=3", "sglang:tp=2,quant=fp8"},
        Case{"tiny-nemotron-h", "megatron:tp=2", "vllm:tp=2"},
        // MXFP8: Megatron TP 4 cuts the 1 x 32 blocks of o_proj (K 16 per
        // rank) and down_proj (48 per rank): their E8M0 scales come from
        // the amax exchange.
        Case{"tiny-qwen3-mx", "megatron:tp=4,pp=2", "vllm:tp=2,quant=mxfp8"},
        Case{"tiny-qwen3-mx", "megatron:tp=4,dp=2", "vllm:tp=2,dp=2,quant=mxfp8"},
        Case{"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8"},
        Case{"tiny-qwen3-moe-mx", "megatron:tp=4,ep=4,etp=1", "vllm:tp=2,dp=2,ep=4,quant=mxfp8"},
        Case{"tiny-qwen3-moe-mx", "megatron:tp=2,pp=2,ep=2,etp=1", "vllm:tp=2,quant=mxfp8"},
        Case{"tiny-qwen3-moe-mx", "fsdp:dp=3", "vllm:tp=1,dp=3,ep=3,quant=mxfp8"},
        // NVFP4: Megatron TP 4 cuts the 1 x 16 blocks of o_proj (K 24 per
        // rank) and down_proj (40 per rank); every parameter's global scale
        // comes from the amax of all its parts on every rank (FSDP's uneven
        // row chunks, Megatron's TP shards, experts per EP rank).
        Case{"tiny-qwen3-fp4", "megatron:tp=4,pp=2", "vllm:tp=2,quant=nvfp4"},
        Case{"tiny-qwen3-fp4", "megatron:tp=4,dp=2", "vllm:tp=2,dp=2,quant=nvfp4"},
        Case{"tiny-qwen3-fp4", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=nvfp4"},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=4,ep=4,etp=1", "vllm:tp=2,dp=2,ep=4,quant=nvfp4"},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=2,pp=2,ep=2,etp=1", "vllm:tp=2,quant=nvfp4"},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=1,dp=3,ep=3,quant=nvfp4"},
        // vLLM's online NVFP4 recipe: the routed experts only (the other
        // linears BF16), each expert's SFScale from the amax over its TP
        // shards and fused parts; expert TP 4 cuts w2's 1 x 16 blocks.
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=4,ep=4,etp=1",
             "vllm:tp=2,dp=2,ep=4,quant=nvfp4,recipe=vllm"},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=2,pp=2,ep=2,etp=1",
             "vllm:tp=2,quant=nvfp4,recipe=vllm"},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=4,etp=4", "vllm:tp=2,quant=nvfp4,recipe=vllm"},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=1,dp=3,ep=3,quant=nvfp4,recipe=vllm"},
        // NVFP4 with kernel=flashinfer: block scales in swizzled 128 x 4
        // tiles, experts' w13 as [up; gate].
        Case{"tiny-qwen3-fp4-fi", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer"},
        Case{"tiny-qwen3-moe-fp4-fi", "megatron:tp=2,ep=2,etp=1",
             "vllm:tp=1,dp=2,ep=2,quant=nvfp4,kernel=flashinfer"},
        Case{"tiny-qwen3-moe-fp4-fi", "fsdp:dp=3", "vllm:tp=1,quant=nvfp4,kernel=flashinfer"},
        // Padded to whole tiles: dense parts of 96 and 144 rows, experts'
        // w2 scales of 10 columns.
        Case{"tiny-qwen3-fp4", "megatron:tp=4,pp=2", "vllm:tp=2,quant=nvfp4,kernel=flashinfer"},
        Case{"tiny-qwen3-moe-fp4", "megatron:tp=2,ep=2,etp=1",
             "vllm:tp=1,dp=2,ep=2,quant=nvfp4,kernel=flashinfer"},
        Case{"tiny-qwen3-mx", "megatron:tp=4,dp=2", "vllm:tp=2,dp=2,quant=mxfp8,kernel=flashinfer"},
        Case{"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8,kernel=flashinfer"},
        Case{"tiny-qwen3-moe-fp4", "fsdp:dp=3", "vllm:tp=1,dp=3,ep=3,quant=nvfp4,kernel=flashinfer"}));

}  // namespace
}  // namespace refit
