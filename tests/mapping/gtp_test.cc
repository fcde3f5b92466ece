// Megatron trainers holding Transformer Engine's native MXFP8 / NVFP4
// parameters, sliced by Generalized Tensor Parallelism (gtp / egtp), into
// engines of the same format: the trainer's buffers are written by
// testing/gtp_reference (independent of mapping/'s tables, every padding
// byte a sentinel), moved by the real planner through the reference copy
// and the executor, and every engine element must equal the reference's
// logical tensors. Then the pairs and layouts refit refuses, by name.
#include <map>
#include <ostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/testing/arrays.h"
#include "mapping/validate.h"
#include "plan/planner.h"
#include "testing/gtp_reference.h"
#include "testing/inproc_ranks.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using testing::GtpTrainer;
using testing::LowPrecision;

constexpr uint8_t kPad = 0xA7;  // every trainer padding byte

struct GtpCase {
  const char* name;
  const char* model;
  const char* trainer;
  GtpTrainer ref;
  const char* engine;
};

GtpTrainer Ref(LowPrecision f, int64_t tp, int64_t gtp, int64_t dp, int64_t ep = 1,
               int64_t etp = 1, int64_t egtp = 1) {
  GtpTrainer t;
  t.format = f;
  t.tp = tp;
  t.gtp = gtp;
  t.dp = dp;
  t.ep = ep;
  t.etp = etp;
  t.egtp = egtp;
  return t;
}

GtpTrainer Grouped(LowPrecision f, int64_t tp, int64_t dp, int64_t ep) {
  GtpTrainer t = Ref(f, tp, 1, dp, ep, 1, 1);
  t.grouped_experts = true;
  return t;
}

constexpr LowPrecision kMx = LowPrecision::kMxfp8;
constexpr LowPrecision kNv = LowPrecision::kNvfp4;

const GtpCase kCases[] = {
    // linear_qkv's TP-local rows (96) pad to 128: GTP rank 1 holds 32 real
    // rows and 32 of padding; o_proj and down_proj are cut along K by TP.
    {"MxDenseTp2Gtp2PaddedTail", "tiny-qwen3-mx", "megatron:tp=2,gtp=2,weights=mxfp8",
     Ref(kMx, 2, 2, 1), "vllm:tp=1,quant=mxfp8"},
    // linear_qkv (192 rows) pads to 256 over gtp=4: GTP rank 3 holds only
    // padding; the engine cuts the rows its own way.
    {"MxDenseGtp4SliceAllPadding", "tiny-qwen3-mx", "megatron:tp=1,gtp=4,weights=mxfp8",
     Ref(kMx, 1, 4, 1), "vllm:tp=2,quant=mxfp8"},
    // Experts over EP 2 and EGTP 2 into vLLM's EP 4 (trainer EP != engine EP).
    {"MxMoeEp2Egtp2IntoEp4", "tiny-qwen3-moe-mx",
     "megatron:tp=2,dp=2,ep=2,etp=1,egtp=2,weights=mxfp8", Ref(kMx, 2, 1, 2, 2, 1, 2),
     "vllm:tp=2,dp=2,ep=4,quant=mxfp8"},
    // gate_up (320 rows) pads to 336 over gtp=3: GTP rank 2 holds 96 real
    // rows and 16 of padding.
    {"NvDenseGtp3PaddedTail", "tiny-qwen3-fp4", "megatron:tp=1,gtp=3,weights=nvfp4",
     Ref(kNv, 1, 3, 1), "vllm:tp=2,quant=nvfp4"},
    // TP 2 with one amax over TP and GTP (amax=tp), GTP and DP replicas.
    {"NvDenseTp2AmaxTp", "tiny-qwen3-fp4", "megatron:tp=2,gtp=2,dp=2,weights=nvfp4,amax=tp",
     Ref(kNv, 2, 2, 2), "vllm:tp=1,dp=2,quant=nvfp4"},
    // Per-expert global scales move with their experts (EP 2 -> EP 4), into
    // FlashInfer's swizzled scales and [up; gate] w13.
    {"NvMoeEgtp2IntoFlashinferEp4", "tiny-qwen3-moe-fp4-fi",
     "megatron:tp=1,gtp=2,dp=2,ep=2,etp=1,egtp=2,weights=nvfp4", Ref(kNv, 1, 2, 2, 2, 1, 2),
     "vllm:tp=1,dp=4,ep=4,quant=nvfp4,kernel=flashinfer"},
    // ModelOpt's grouped [E_local, ...] experts with [E_local] global
    // scales, EP 2 into EP 4.
    {"NvMoeGroupedEp2IntoEp4", "tiny-qwen3-moe-fp4",
     "megatron:tp=1,dp=2,ep=2,etp=1,experts=grouped,weights=nvfp4", Grouped(kNv, 1, 2, 2),
     "vllm:tp=1,dp=4,ep=4,quant=nvfp4"},
    {"MxMoeGroupedEp4IntoTp2", "tiny-qwen3-moe-mx",
     "megatron:tp=1,dp=4,ep=4,etp=1,experts=grouped,weights=mxfp8", Grouped(kMx, 1, 4, 4),
     "vllm:tp=2,quant=mxfp8"},
    {"NvMoeEp4IntoTp2", "tiny-qwen3-moe-fp4",
     "megatron:tp=1,gtp=2,dp=2,ep=4,etp=1,weights=nvfp4", Ref(kNv, 1, 2, 2, 4, 1, 1),
     "vllm:tp=2,quant=nvfp4"},
};

void PrintTo(const GtpCase& c, std::ostream* os) { *os << c.name; }

class GtpRoundTest : public ::testing::TestWithParam<GtpCase> {};

TEST_P(GtpRoundTest, EveryEngineByteIsTheReferences) {
  const GtpCase& c = GetParam();
  testing::PlannedCase pc;
  const absl::Status planned = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
  ASSERT_TRUE(planned.ok()) << planned;
  auto& [model, src, dst, plan] = pc;
  EXPECT_TRUE(plan->conversions.empty()) << "codes and scales move as bytes";
  absl::StatusOr<testing_mapping::Ckpt> ckpt =
      testing::LowPrecisionCheckpoint(*model, c.ref.format, 7);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const TensorSpec& t : dst->layout.tensors) {
    auto it = ckpt->find(t.name);
    ASSERT_NE(it, ckpt->end()) << t.name;
    EXPECT_EQ(it->second.shape, t.shape) << t.name;
    EXPECT_EQ(it->second.dtype, t.dtype) << t.name;
  }
  // Each trainer rank registers exactly the reference's buffers.
  ASSERT_EQ(src->layout.world_size, c.ref.world());
  OwnedBuffers s = AllocateBuffers(src->layout);
  bool padded = false;
  for (int32_t r = 0; r < src->layout.world_size; ++r) {
    testing_mapping::Bufs ref = testing::MegatronGtpRank(*model, c.ref, *ckpt, r, kPad);
    std::vector<LocalBuffer> registered;
    for (const auto& [name, a] : ref) {
      registered.push_back({name, a.shape, a.dtype, static_cast<int64_t>(a.bytes.size())});
    }
    absl::Status v = ValidateRankBuffers(*src, r, registered);
    ASSERT_TRUE(v.ok()) << c.name << ": " << v.message().substr(0, 2000);
    for (int32_t b = src->rank_begin[r]; b < src->rank_begin[r + 1]; ++b) {
      const std::vector<uint8_t>& bytes = ref.at(src->layout.buffers[b].name).bytes;
      std::copy(bytes.begin(), bytes.end(), s.ptrs[b]);
      for (uint8_t x : bytes) padded = padded || x == kPad;
    }
  }
  EXPECT_TRUE(padded) << "the case has padding bytes";
  ASSERT_EQ(plan->dst.buffers.size(), dst->layout.buffers.size());
  {
    OwnedBuffers d = AllocateBuffers(plan->dst, 0x5A);
    ASSERT_TRUE(ReferenceCopy(*plan, s.ptrs, d.ptrs).ok());
    absl::Status st = testing_mapping::CheckRecords(dst->layout, d.storage, *ckpt);
    EXPECT_TRUE(st.ok()) << "reference copy: " << st.message().substr(0, 600);
  }
  OwnedBuffers d = AllocateBuffers(plan->dst, 0x5A);
  const std::vector<absl::Status> status = testing::RunAllRanksInProc(*plan, s, d, true);
  for (const absl::Status& st : status) ASSERT_TRUE(st.ok()) << st;
  absl::Status st = testing_mapping::CheckRecords(dst->layout, d.storage, *ckpt);
  EXPECT_TRUE(st.ok()) << "executor: " << st.message().substr(0, 600);
  // A flipped byte in any engine weight is seen.
  d.storage[dst->rank_begin[0] + 1][0] ^= 0x10;
  EXPECT_FALSE(testing_mapping::CheckRecords(dst->layout, d.storage, *ckpt).ok());
}

INSTANTIATE_TEST_SUITE_P(Cases, GtpRoundTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<GtpCase>& i) {
                           return std::string(i.param.name);
                         });

// BF16 GTP trainers (weights=model: pad_for_alignment 1) into BF16 and
// quantizing engines: GTP's row slices (342 rows of 1024 here) cut the
// 128x128 FP8 tiles and NVFP4's fused parameters across trainer ranks, whose
// amaxes the plan exchanges; every engine element is the converted pattern.
struct Bf16Case {
  const char* trainer;
  const char* engine;
};

void PrintTo(const Bf16Case& c, std::ostream* os) { *os << c.trainer << " -> " << c.engine; }

class Bf16GtpTest : public ::testing::TestWithParam<Bf16Case> {};

TEST_P(Bf16GtpTest, EngineHoldsTheTrainersPattern) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-moe-b128");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src =
      BuildTrainerLayout(*model, *ParseTrainerSpec(GetParam().trainer));
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec(GetParam().engine));
  ASSERT_TRUE(dst.ok()) << dst.status();
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // linear_qkv's TP-local rows (1024 at tp=1, 512 at tp=2) pad to a
  // multiple of 3 and split in three.
  const int64_t rows = src->layout.world_size == 6 ? 342 : 171;
  for (const LocalBuffer& b : RankBuffers(*src, 5)) {
    if (b.name == "decoder.layers.0.self_attention.linear_qkv.weight") {
      EXPECT_EQ(b.shape, (std::vector<int64_t>{rows, 256}));
    }
  }
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 3};
  po.source_dtypes = &source;
  OwnedBuffers s = AllocateBuffers(src->layout);
  FillPattern(src->layout, s.ptrs, po);
  {
    OwnedBuffers d = AllocateBuffers(plan->dst);
    ASSERT_TRUE(ReferenceCopy(*plan, s.ptrs, d.ptrs).ok());
    absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
    EXPECT_TRUE(st.ok()) << "reference copy: " << st.message().substr(0, 600);
  }
  OwnedBuffers d = AllocateBuffers(plan->dst);
  const std::vector<absl::Status> status = testing::RunAllRanksInProc(*plan, s, d, true);
  for (const absl::Status& st : status) ASSERT_TRUE(st.ok()) << st;
  absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
  EXPECT_TRUE(st.ok()) << "executor: " << st.message().substr(0, 600);
}

constexpr char kGtp3[] = "megatron:tp=1,gtp=3,dp=2,ep=2,etp=1,egtp=3";
const Bf16Case kBf16Cases[] = {
    {kGtp3, "vllm:tp=2"},
    {kGtp3, "vllm:tp=2,quant=fp8"},
    {kGtp3, "vllm:tp=1,dp=2,ep=2,quant=mxfp8"},
    {kGtp3, "vllm:tp=2,quant=nvfp4"},
    // Two pipeline stages of tp*gtp*dp = 2*3*1 ranks, experts over EGTP 3.
    {"megatron:tp=2,gtp=3,pp=2,ep=2,etp=1,egtp=3", "vllm:tp=2,quant=fp8"},
};

INSTANTIATE_TEST_SUITE_P(Engines, Bf16GtpTest, ::testing::ValuesIn(kBf16Cases));

absl::Status PlanOf(const char* model, const char* trainer, const char* engine) {
  absl::StatusOr<ModelConfig> m = LoadModelConfig(model);
  if (!m.ok()) return m.status();
  absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(trainer);
  if (!ts.ok()) return ts.status();
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*m, *ts);
  if (!src.ok()) return src.status();
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*m, *ParseEngineSpec(engine));
  if (!dst.ok()) return dst.status();
  return BuildPlan(src->layout, dst->layout, PlannerOptions{}).status();
}

TEST(GtpRefusalTest, AnotherFormatIsRefusedNamingTheParameterAndBothFormats) {
  absl::Status st = PlanOf("tiny-qwen3-mx", "megatron:tp=1,gtp=2,weights=mxfp8",
                           "vllm:tp=1,quant=nvfp4");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("decoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("(rank 0, parameter decoder."));
  EXPECT_THAT(std::string(st.message()), HasSubstr("as format mxfp8 codes"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("the engine as format nvfp4 codes"));
  st = PlanOf("tiny-qwen3-fp4", "megatron:tp=1,gtp=2,weights=nvfp4", "vllm:tp=1");
  EXPECT_THAT(std::string(st.message()), HasSubstr("as format nvfp4 codes"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("the engine as bf16"));
  st = PlanOf("tiny-qwen3-fp4", "megatron:tp=1,weights=nvfp4", "vllm:tp=1,quant=mxfp8");
  EXPECT_THAT(std::string(st.message()), HasSubstr("the engine as format mxfp8 codes"));
}

TEST(GtpRefusalTest, PerShardAmaxIsRefusedWhereTheEngineKeepsOneGlobalScale) {
  absl::Status st =
      PlanOf("tiny-qwen3-fp4", "megatron:tp=2,gtp=2,weights=nvfp4", "vllm:tp=2,quant=nvfp4");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("NVFP4 parameter decoder.layers.0.self_attention.linear_qkv.weight on "
                        "rank 0"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("amax=tp"));
  // Expert TP cuts each expert too.
  st = PlanOf("tiny-qwen3-moe-fp4", "megatron:tp=1,dp=2,ep=1,etp=2,weights=nvfp4",
              "vllm:tp=2,quant=nvfp4");
  EXPECT_THAT(std::string(st.message()), HasSubstr("mlp.experts.linear_fc1.weight0"));
}

TEST(GtpRefusalTest, PartsTheEngineFusesButTheTrainerQuantizesApartAreRefused) {
  absl::Status st = PlanOf("tiny-deepseek-v3-b128", "megatron:tp=1,ep=2,dp=2,etp=1,weights=nvfp4",
                           "vllm:tp=1,quant=nvfp4");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("decoder.layers.0.self_attention.linear_kv_down_proj.weight on rank 0 "
                        "holds model.layers.0.self_attn.kv_a_proj_with_mqa.weight without "
                        "model.layers.0.self_attn.q_a_proj.weight"));
  // MXFP8 has no global scale: the same model moves.
  EXPECT_TRUE(PlanOf("tiny-deepseek-v3-b128",
                     "megatron:tp=1,gtp=2,ep=2,dp=2,etp=1,egtp=2,weights=mxfp8",
                     "vllm:tp=1,quant=mxfp8")
                  .ok());
}

TEST(GtpRefusalTest, LayoutsTheTrainerCannotHaveAreRefused) {
  absl::Status st = PlanOf("tiny-qwen3-moe-mx",
                           "megatron:tp=1,dp=4,ep=2,etp=1,egtp=2,experts=grouped,weights=mxfp8",
                           "vllm:tp=1,quant=mxfp8");
  EXPECT_THAT(std::string(st.message()), HasSubstr("experts=indexed"));
  st = PlanOf("tiny-deepseek-v3-fp8", "megatron:tp=1,gtp=2", "vllm:tp=1");
  EXPECT_THAT(std::string(st.message()), HasSubstr("gtp/egtp on an FP8 model"));
  st = PlanOf("tiny-qwen3-mx", "megatron:tp=1,weights=fp6", "vllm:tp=1");
  EXPECT_THAT(std::string(st.message()), HasSubstr("weights=fp6"));
  st = PlanOf("tiny-qwen3-mx", "megatron:tp=1,gtp=2,ep=4", "vllm:tp=1");
  EXPECT_THAT(std::string(st.message()), HasSubstr("etp*ep*egtp"));
}

// Registration checks a GTP rank's shapes: TE's scale_inv padded to 128
// rows and 4 columns, and the padded row slice.
TEST(GtpRegistrationTest, AWrongShapeNamesTheParameterAndRank) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-mx");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src =
      BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=2,gtp=2,weights=mxfp8"));
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<LocalBuffer> mine = RankBuffers(*src, 3);
  bool found = false;
  for (LocalBuffer& b : mine) {
    if (b.name == "decoder.layers.1.self_attention.linear_qkv.weight_scale") {
      EXPECT_EQ(b.shape, (std::vector<int64_t>{128, 4}));  // [64, 2] as TE pads it
      EXPECT_EQ(b.dtype, DType::kU8);
      b.shape = {64, 2};
      b.byte_size = 128;
      found = true;
    }
    if (b.name == "decoder.layers.1.self_attention.linear_qkv.weight") {
      EXPECT_EQ(b.shape, (std::vector<int64_t>{64, 64}));  // 96 rows padded to 128, / 2
      EXPECT_EQ(b.dtype, DType::kF8E4M3);
    }
  }
  ASSERT_TRUE(found);
  absl::Status st = ValidateRankBuffers(*src, 3, mine);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("rank 3: parameter decoder.layers.1.self_attention.linear_qkv.weight_scale "
                        "has shape [64, 2], expected [128, 4]"));
}

TEST(GtpSpecTest, TheNewKeysRoundTrip) {
  absl::StatusOr<TrainerSpec> s = ParseTrainerSpec(
      "megatron:tp=2,gtp=4,dp=2,ep=4,etp=1,egtp=2,weights=nvfp4,amax=tp");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->world_size(), 16);
  EXPECT_EQ(s->stage_size(), 16);
  absl::StatusOr<TrainerSpec> back = ParseTrainerSpec(TrainerSpecString(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(TrainerSpecString(*back), TrainerSpecString(*s));
  EXPECT_EQ(back->gtp, 4);
  EXPECT_EQ(back->egtp, 2);
  EXPECT_EQ(back->weights, QuantFormat::kNvfp4);
  EXPECT_EQ(back->amax, TrainerSpec::AmaxScope::kTp);
  EXPECT_THAT(std::string(ParseTrainerSpec("megatron:tp=1,amax=tp").status().message()),
              HasSubstr("weights=nvfp4"));
}

}  // namespace
}  // namespace refit
