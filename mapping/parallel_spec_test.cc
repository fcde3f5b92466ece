#include "mapping/parallel_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

TEST(ParallelSpecTest, ParsesMegatronWithAllKeys) {
  auto s = ParseTrainerSpec(
      "megatron:tp=8,pp=16,ep=16,etp=1,dp=2,first=3,last=2,experts=grouped,"
      "glu_chunk=64,vocab_div=64,gpus_per_host=8");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tp, 8);
  EXPECT_EQ(s->pp, 16);
  EXPECT_EQ(s->ep, 16);
  EXPECT_EQ(s->expert_tp(), 1);
  EXPECT_EQ(s->world_size(), 256);
  EXPECT_EQ(s->first, 3);
  EXPECT_EQ(s->last, 2);
  EXPECT_TRUE(s->grouped_experts);
  EXPECT_EQ(s->glu_chunk, 64);
  EXPECT_EQ(s->gpus_per_host, 8);
  auto again = ParseTrainerSpec(TrainerSpecString(*s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->world_size(), 256);
  EXPECT_EQ(again->first, 3);
}

TEST(ParallelSpecTest, EtpDefaultsToTp) {
  auto s = ParseTrainerSpec("megatron:tp=4,dp=2");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->expert_tp(), 4);
}

TEST(ParallelSpecTest, RejectsUnknownKeysKindsAndImpossibleMeshes) {
  auto a = ParseTrainerSpec("megatron:tp=2,zz=3");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("zz"));
  auto b = ParseTrainerSpec("deepspeed:dp=2");
  EXPECT_THAT(b.status().message(), HasSubstr("deepspeed"));
  auto c = ParseTrainerSpec("megatron:tp=2,dp=1,ep=4,etp=1");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("expert mesh"));
  auto d = ParseTrainerSpec("megatron:tp=0");
  EXPECT_FALSE(d.ok());
  auto e = ParseTrainerSpec("fsdp:dp=6,shard=4");
  EXPECT_THAT(e.status().message(), HasSubstr("shard=4"));
}

// Degrees that do not fit, or worlds nobody runs, are refused by name; a
// value past 2^32 used to wrap into a small one (tp=4294967298 read as 2).
TEST(ParallelSpecTest, RejectsDegreesAndWorldsOutOfRange) {
  auto a = ParseTrainerSpec("megatron:tp=4294967298");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("tp=4294967298"));
  auto b = ParseTrainerSpec("megatron:tp=1024,pp=1024,dp=1024");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("1073741824 ranks"));
  auto c = ParseEngineSpec("vllm:tp=2048,dp=2048");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("4194304 ranks"));
  auto d = ParseEngineSpec("vllm:dp=3000000000");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("dp=3000000000"));
  EXPECT_TRUE(ParseTrainerSpec("megatron:tp=8,pp=16,ep=16,etp=1,dp=64").ok());
}

TEST(ParallelSpecTest, VllmEpMustEqualTpTimesDp) {
  auto ok = ParseEngineSpec("vllm:tp=8,dp=2,ep=16");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->world_size(), 16);
  auto bad = ParseEngineSpec("vllm:tp=8,dp=2,ep=8");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tp*dp = 16"));
  EXPECT_FALSE(ParseEngineSpec("trtllm:tp=2").ok());
  auto sg = ParseEngineSpec("sglang:tp=8,dp=2,ep=4");
  ASSERT_TRUE(sg.ok()) << sg.status();
  EXPECT_EQ(sg->kind, EngineSpec::Kind::kSglang);
  EXPECT_EQ(sg->world_size(), 16);
  EXPECT_EQ(EngineSpecString(*sg), "sglang:tp=8,dp=2,ep=4");
  auto sgbad = ParseEngineSpec("sglang:tp=8,ep=3");
  ASSERT_FALSE(sgbad.ok());
  EXPECT_THAT(sgbad.status().message(), HasSubstr("must divide tp=8"));
}

TEST(ParallelSpecTest, PipelineSplits) {
  TrainerSpec s;
  s.pp = 4;
  auto even = PipelineStageLayers(61, s);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(*even, (std::vector<int64_t>{16, 15, 15, 15}));
  s.pp = 16;
  s.first = 3;
  s.last = 2;
  auto fl = PipelineStageLayers(61, s);
  ASSERT_TRUE(fl.ok()) << fl.status();
  EXPECT_EQ((*fl)[0], 3);
  EXPECT_EQ((*fl)[1], 4);
  EXPECT_EQ((*fl)[15], 2);
  s.first = 4;
  EXPECT_FALSE(PipelineStageLayers(61, s).ok());
  s.first = 0;
  s.last = 0;
  s.pp = 8;
  EXPECT_FALSE(PipelineStageLayers(5, s).ok());
}

// The kernel table: each kernel= value parses to its kernel, and its row
// says how the engine's scales lie and whether its FP8 is requantized.
TEST(ParallelSpecTest, KernelTableGivesEachKernelItsScaleLayout) {
  struct Want {
    EngineSpec::Kernel kernel;
    ScaleSwizzle swizzle;
    bool requant;
  };
  for (const Want& w : {Want{EngineSpec::Kernel::kCheckpoint, ScaleSwizzle::kRowMajor, false},
                        Want{EngineSpec::Kernel::kFlashinfer, ScaleSwizzle::kTiles128x4, false},
                        Want{EngineSpec::Kernel::kDeepgemm, ScaleSwizzle::kRowMajor, true},
                        Want{EngineSpec::Kernel::kDeepgemmSm100, ScaleSwizzle::kPackedUe8m0,
                             true}}) {
    const KernelRow& row = KernelTraits(w.kernel);
    EXPECT_EQ(row.kernel, w.kernel);
    EXPECT_EQ(row.swizzle, w.swizzle) << row.name;
    EXPECT_EQ(row.requant, w.requant) << row.name;
    auto s = ParseEngineSpec(std::string("vllm:tp=1,quant=fp8,kernel=") + row.name);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->kernel, w.kernel) << row.name;
  }
  // quant= names a format row and prints the same text back.
  for (const char* q : {"fp8", "fp8-ue8m0", "mxfp8", "nvfp4"}) {
    auto s = ParseEngineSpec(std::string("vllm:tp=1,quant=") + q);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(s->quant.has_value()) << q;
    EXPECT_STREQ(QuantName(*s->quant), q);
    EXPECT_EQ(EngineSpecString(*s), std::string("vllm:tp=1,dp=1,quant=") + q);
  }
  EXPECT_EQ(ParseEngineSpec("vllm:tp=1,quant=fp8")->quant, QuantFormat::kFp8Block);
  EXPECT_EQ(ParseEngineSpec("vllm:tp=1,quant=fp8-ue8m0")->quant, QuantFormat::kFp8BlockUe8m0);
  EXPECT_FALSE(ParseEngineSpec("vllm:tp=1,quant=none")->quant.has_value());
}

TEST(ParallelSpecTest, KernelLayoutsParseRoundTripAndRefuseByName) {
  auto f = ParseEngineSpec("vllm:tp=2,ep=2,kernel=flashinfer");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kernel, EngineSpec::Kernel::kFlashinfer);
  EXPECT_EQ(EngineSpecString(*f), "vllm:tp=2,dp=1,ep=2,kernel=flashinfer");
  auto d = ParseEngineSpec(EngineSpecString(*ParseEngineSpec("vllm:tp=1,quant=fp8,kernel=deepgemm")));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kernel, EngineSpec::Kernel::kDeepgemm);
  // DeepGEMM on SM100: accepted, and it round-trips.
  auto b = ParseEngineSpec("vllm:tp=2,quant=fp8,kernel=deepgemm-sm100");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kernel, EngineSpec::Kernel::kDeepgemmSm100);
  EXPECT_EQ(EngineSpecString(*b), "vllm:tp=2,dp=1,quant=fp8,kernel=deepgemm-sm100");
  EXPECT_EQ(ParseEngineSpec(EngineSpecString(*b))->kernel, EngineSpec::Kernel::kDeepgemmSm100);
  EXPECT_EQ(ParseEngineSpec("vllm:tp=1")->kernel, EngineSpec::Kernel::kCheckpoint);
  EXPECT_EQ(EngineSpecString(*ParseEngineSpec("vllm:tp=1,kernel=checkpoint")), "vllm:tp=1,dp=1");
  // SGLang's BF16 experts for FlashInfer CUTLASS: w13 as [up; gate].
  auto sg = ParseEngineSpec("sglang:tp=2,kernel=flashinfer");
  ASSERT_TRUE(sg.ok()) << sg.status();
  EXPECT_EQ(sg->kernel, EngineSpec::Kernel::kFlashinfer);
  EXPECT_THAT(EngineSpecString(*sg), HasSubstr("kernel=flashinfer"));
  struct Bad {
    const char* spec;
    const char* says;
  };
  for (const Bad& b : {Bad{"vllm:tp=1,kernel=trtllm", "VLLM_FLASHINFER_MOE_BACKEND=throughput"},
                       Bad{"vllm:tp=1,kernel=marlin", "Marlin"},
                       Bad{"vllm:tp=1,kernel=aiter", "VLLM_ROCM_USE_AITER=0"},
                       Bad{"vllm:tp=1,kernel=cutlass3",
                           "is not checkpoint, flashinfer, deepgemm or deepgemm-sm100"},
                       Bad{"sglang:tp=1,quant=fp8,kernel=deepgemm-sm100", "transform_scale_ue8m0"},
                       Bad{"vllm:tp=1,quant=fp8-ue8m0,kernel=deepgemm-sm100", "use quant=fp8"},
                       Bad{"vllm:tp=1,quant=nvfp4,kernel=deepgemm-sm100", "DeepGEMM reads block FP8"},
                       Bad{"sglang:tp=1,quant=fp8,kernel=deepgemm", "SGLANG_ENABLE_JIT_DEEPGEMM=0"},
                       Bad{"sglang:tp=1,quant=fp8,kernel=flashinfer", "per-tensor scales only"},
                       Bad{"vllm:tp=1,quant=fp8-ue8m0,kernel=deepgemm", "use quant=fp8"}}) {
    auto s = ParseEngineSpec(b.spec);
    ASSERT_FALSE(s.ok()) << b.spec;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(b.says)) << b.spec;
  }
}

TEST(ParallelSpecTest, Mxfp8ParsesRoundTripsAndRefusesWhatItDoesNotWrite) {
  auto m = ParseEngineSpec("vllm:tp=2,quant=mxfp8");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->quant, QuantFormat::kMxfp8);
  EXPECT_EQ(EngineSpecString(*m), "vllm:tp=2,dp=1,quant=mxfp8");
  auto fi = ParseEngineSpec("vllm:tp=1,quant=mxfp8,kernel=flashinfer");
  ASSERT_TRUE(fi.ok()) << fi.status();
  EXPECT_EQ(fi->kernel, EngineSpec::Kernel::kFlashinfer);
  auto dg = ParseEngineSpec("vllm:tp=1,quant=mxfp8,kernel=deepgemm");
  ASSERT_FALSE(dg.ok());
  EXPECT_THAT(std::string(dg.status().message()), HasSubstr("swizzle_mxfp8_scale"));
  auto sg = ParseEngineSpec("sglang:tp=1,quant=mxfp8");
  ASSERT_FALSE(sg.ok());
  EXPECT_THAT(std::string(sg.status().message()), HasSubstr("SGLang"));
  auto q = ParseEngineSpec("vllm:tp=1,quant=mxfp9");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("fp8, fp8-ue8m0, mxfp8 or nvfp4"));
}

}  // namespace
}  // namespace refit
