// The real model configs through the real-size layouts the CLI targets:
// they must build (or fail with a reason), quickly, and register buffers of
// the sizes vLLM / Megatron use.
#include <cstdio>
#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

double UserSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6;
}

struct Built {
  MappedSide src, dst;
  double seconds = 0;
};

Built Build(const std::string& model, bool fp8, const std::string& trainer,
            const std::string& engine) {
  Built out;
  auto c = LoadModelConfig(model);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!fp8) EXPECT_TRUE(SetWeightDType(&*c, "bf16").ok());
  auto ts = ParseTrainerSpec(trainer);
  auto es = ParseEngineSpec(engine);
  EXPECT_TRUE(ts.ok() && es.ok());
  const double t0 = UserSeconds();
  auto src = BuildTrainerLayout(*c, *ts);
  auto dst = BuildEngineLayout(*c, *es);
  // User CPU time: the machine running the tests is shared, and first-touch
  // page faults (system time) vary with its load.
  out.seconds = UserSeconds() - t0;
  EXPECT_TRUE(src.ok()) << src.status();
  EXPECT_TRUE(dst.ok()) << dst.status();
  if (src.ok()) out.src = *std::move(src);
  if (dst.ok()) out.dst = *std::move(dst);
  return out;
}

int64_t Bytes(const SideLayout& s) {
  int64_t n = 0;
  for (const BufferSpec& b : s.buffers) n += b.byte_size;
  return n;
}

const LocalBuffer* Find(const std::vector<LocalBuffer>& bufs, const std::string& name) {
  for (const LocalBuffer& b : bufs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

TEST(RealModelsTest, DeepseekV3Pp16Ep16ToVllmTp32Dp8) {
  Built b = Build("deepseek-v3", false, "megatron:tp=8,pp=16,ep=16,etp=1,dp=2",
                  "vllm:tp=32,dp=8");
  EXPECT_EQ(b.src.layout.world_size, 256);
  EXPECT_EQ(b.dst.layout.world_size, 256);
  std::printf("deepseek-v3 bf16: %zu + %zu records, %zu + %zu buffers, %.3f s\n",
              b.src.layout.records.size(), b.dst.layout.records.size(),
              b.src.layout.buffers.size(), b.dst.layout.buffers.size(), b.seconds);
  EXPECT_LT(b.seconds, 3.0);  // user CPU s; `refit plan` budget is 2 s wall
  // vLLM TP-sharded experts: all 256 experts, 2048/32 = 64 rows each.
  auto e5 = RankBuffers(b.dst, 5);
  const LocalBuffer* w13 = Find(e5, "model.layers.3.mlp.experts.w13_weight");
  ASSERT_NE(w13, nullptr);
  EXPECT_EQ(w13->shape, (std::vector<int64_t>{256, 128, 7168}));
  // Megatron: 61 layers over 16 stages, first 13 stages 4 layers; stage 15
  // holds the last 3 layers and the output layer.
  auto t255 = RankBuffers(b.src, 255);
  EXPECT_NE(Find(t255, "decoder.layers.2.mlp.experts.linear_fc1.weight15"), nullptr);
  EXPECT_EQ(Find(t255, "decoder.layers.3.mlp.router.weight"), nullptr);
  const LocalBuffer* out = Find(t255, "output_layer.weight");
  ASSERT_NE(out, nullptr);
  // 129280 padded to a multiple of 128 * tp = 1024: 130048.
  EXPECT_EQ(out->shape, (std::vector<int64_t>{130048 / 8, 7168}));
  // No accidental replication. Engine: the 8 DP replicas hold the model 8
  // times, plus vocabulary padding and what vLLM replicates over TP (MLA's
  // fused_qkv_a_proj, routers, norms: under 6%). Trainer: experts once
  // (ep*etp = tp*dp, so no expert data parallelism), dense weights twice.
  int64_t model_bytes = 0, expert_bytes = 0;
  for (const TensorSpec& t : b.dst.layout.tensors) {
    int64_t n = DTypeSize(t.dtype);
    for (int64_t d : t.shape) n *= d;
    model_bytes += n;
    if (t.stacked) expert_bytes += n;
  }
  EXPECT_GE(Bytes(b.dst.layout), 8 * model_bytes);
  EXPECT_LE(Bytes(b.dst.layout), 8 * model_bytes * 106 / 100);
  const int64_t dense_bytes = model_bytes - expert_bytes;
  EXPECT_GE(Bytes(b.src.layout), expert_bytes + 2 * dense_bytes);
  // (+ MLA down projections, routers and norms replicated over TP: < 3%)
  EXPECT_LE(Bytes(b.src.layout), (expert_bytes + 2 * dense_bytes) * 103 / 100);
}

TEST(RealModelsTest, DeepseekV3Fp8ToExpertParallelEngine) {
  Built b = Build("deepseek-v3", true, "megatron:tp=8,pp=16,ep=16,etp=1,dp=2",
                  "vllm:tp=8,dp=4,ep=32");
  std::printf("deepseek-v3 fp8: %zu + %zu records, %.3f s\n",
              b.src.layout.records.size(), b.dst.layout.records.size(), b.seconds);
  EXPECT_LT(b.seconds, 3.0);  // user CPU s; `refit plan` budget is 2 s wall
  auto e0 = RankBuffers(b.dst, 0);
  const LocalBuffer* s = Find(e0, "model.layers.3.mlp.experts.w13_weight_scale_inv");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{8, 32, 56}));
  const LocalBuffer* a = Find(e0, "model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{12 + 5, 56}));
}

TEST(RealModelsTest, DeepseekV3Fp8AtTp32SplitsScaleBlocks) {
  auto c = LoadModelConfig("deepseek-v3");
  auto es = ParseEngineSpec("vllm:tp=32,dp=8");
  auto dst = BuildEngineLayout(*c, *es);
  ASSERT_FALSE(dst.ok());
  EXPECT_THAT(dst.status().message(), HasSubstr("split a 128x128"));
  std::printf("%s\n", std::string(dst.status().message()).c_str());
}

TEST(RealModelsTest, KimiK2From256To128) {
  Built b = Build("kimi-k2", false, "megatron:tp=8,pp=16,ep=16,etp=1,dp=2",
                  "vllm:tp=16,dp=8,ep=128");
  std::printf("kimi-k2: %zu + %zu records, %.3f s\n", b.src.layout.records.size(),
              b.dst.layout.records.size(), b.seconds);
  EXPECT_LT(b.seconds, 3.0);  // user CPU s; `refit plan` budget is 2 s wall
  auto e0 = RankBuffers(b.dst, 0);
  const LocalBuffer* w13 = Find(e0, "model.layers.1.mlp.experts.w13_weight");
  ASSERT_NE(w13, nullptr);
  EXPECT_EQ(w13->shape, (std::vector<int64_t>{3, 4096, 7168}));  // 384 / 128
}

TEST(RealModelsTest, OtherModelsBuild) {
  Built q = Build("qwen3-30b-a3b", false, "megatron:tp=4,pp=2,ep=8,etp=1,dp=2",
                  "vllm:tp=4,dp=2,ep=8");
  Built d = Build("qwen3-8b", false, "fsdp:dp=16,shard=8", "vllm:tp=8");
  auto q8 = RankBuffers(d.dst, 0);
  const LocalBuffer* qkv = Find(q8, "model.layers.0.self_attn.qkv_proj.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{(4 + 2) * 128, 4096}));
  Built l = Build("llama-3.1-70b", false, "megatron:tp=8,pp=4,dp=2", "vllm:tp=16");
  // tp=16 > 8 kv heads: each rank holds 1 kv head.
  auto l0 = RankBuffers(l.dst, 3);
  qkv = Find(l0, "model.layers.79.self_attn.qkv_proj.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{(4 + 2) * 128, 8192}));
  Built n = Build("nemotron-h-8b", false, "megatron:tp=4,pp=2,dp=2", "vllm:tp=8");
  auto n0 = RankBuffers(n.dst, 0);
  const LocalBuffer* in = Find(n0, "model.layers.0.mixer.in_proj.weight");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->shape, (std::vector<int64_t>{(2 * 8192 + 2 * 1024 + 128) / 8, 4096}));
}

}  // namespace
}  // namespace refit
