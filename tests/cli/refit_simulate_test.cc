// Runs `refit simulate` as a user would (the binary, its exit code, its
// output) on a generated random checkpoint, then reads the engine files back
// and checks every engine record byte for byte against the checkpoint
// through mapping's records + GatherFromRecord (independent of the
// executor), and that padding bytes are zero. Also: invalid checkpoints
// fail with exit 1 and a message naming the tensor.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/scatter.h"
#include "testing/reference_quantizer.h"
#include "cli/safetensors.h"
#include "tests/cli/simulate_harness.h"

namespace refit {
namespace {

// The bytes an FP8 engine holds for `name` (a member of engine tensor t)
// when the checkpoint holds it, or its weight, in bf16: the reference
// quantizer's values, or its scales for a "..._scale_inv" tensor. nullopt
// when t is not quantized from the checkpoint.
std::optional<std::vector<uint8_t>> QuantizedMember(const TensorSpec& t,
                                                    const std::string& name,
                                                    const Checkpoint& c, bool ue8m0) {
  const bool scale = absl::EndsWith(name, "_scale_inv") && !c.bytes.count(name);
  const std::string weight = scale ? name.substr(0, name.size() - 10) : name;
  auto it = c.meta.find(weight);
  if (it == c.meta.end() || it->second.dtype != DType::kBF16 ||
      (!scale && t.dtype != DType::kF8E4M3)) {
    return std::nullopt;
  }
  const std::vector<uint8_t>& b = c.bytes.at(weight);
  std::vector<float> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t bits = (static_cast<uint32_t>(b[2 * i]) |
                           static_cast<uint32_t>(b[2 * i + 1]) << 8) << 16;
    std::memcpy(&v[i], &bits, 4);
  }
  testing::Quantized q = testing::ReferenceQuantize(v, it->second.shape, 128, ue8m0);
  if (!scale) return q.values;
  std::vector<uint8_t> out(q.scales.size() * 4);
  std::memcpy(out.data(), q.scales.data(), out.size());
  return out;
}

// Checks every engine rank file against the layout and the checkpoint.
void CheckEngineFiles(const MappedSide& dst, const Checkpoint& c,
                      const std::string& out, bool expect_transformed) {
  const SideLayout& side = dst.layout;
  bool ue8m0 = false;  // quant=fp8-ue8m0: the tensors' format says so
  for (const TensorSpec& t : side.tensors) ue8m0 |= t.format == QuantFormat::kFp8BlockUe8m0;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (int32_t r = 0; r < side.world_size; ++r) {
    auto f = SafetensorsFile::Open(absl::StrCat(out, "/engine/rank", r,
                                                ".safetensors"));
    ASSERT_TRUE(f.ok()) << f.status();
    std::vector<LocalBuffer> want = RankBuffers(dst, r);
    ASSERT_EQ((*f)->entries().size(), want.size()) << "engine rank " << r;
    for (const LocalBuffer& b : want) {
      const SafetensorsEntry* e = (*f)->Find(b.name);
      ASSERT_NE(e, nullptr) << "rank " << r << " lacks " << b.name;
      EXPECT_EQ(e->shape, b.shape) << b.name;
      EXPECT_EQ(e->dtype, b.dtype) << b.name;
    }
    files.push_back(std::move(*f));
  }
  int64_t checked = 0, transformed = 0, quantized = 0;
  for (const Record& rec : side.records) {
    const TensorSpec& t = side.tensors[rec.tensor];
    const SafetensorsEntry* e =
        files[rec.rank]->Find(side.buffers[rec.buffer].name);
    ASSERT_NE(e, nullptr);
    int64_t lo = -1, hi = 0;
    if (t.stacked) {
      lo = rec.box.origin(0);
      hi = rec.box.limit(0);
    }
    for (int64_t m = lo; m < (t.stacked ? hi : 0); ++m) {
      const std::string name = t.stacked ? MemberName(t, m) : t.name;
      std::vector<uint8_t> want;
      if (auto fp8 = QuantizedMember(t, name, c, ue8m0)) {
        want = *std::move(fp8);  // a BF16 checkpoint into an FP8 engine
        ++quantized;
      } else {
        want = c.bytes.at(name);
      }
      if (t.transform == Transform::kNegExp) {
        // The engine keeps A = -exp(A_log) as f32 (NemotronH), computed
        // from the bf16 checkpoint value; on the host, so bit for bit.
        ASSERT_EQ(t.dtype, DType::kF32) << t.name;
        std::vector<uint8_t> f32(want.size() * 2);
        for (size_t i = 0; i + 2 <= want.size(); i += 2) {
          const uint32_t bits = (static_cast<uint32_t>(want[i]) |
                                 static_cast<uint32_t>(want[i + 1]) << 8) << 16;
          float x;
          std::memcpy(&x, &bits, 4);
          const float y = static_cast<float>(-std::exp(static_cast<double>(x)));
          std::memcpy(f32.data() + 2 * i, &y, 4);
        }
        want = std::move(f32);
        ++transformed;
      }
      // Start from the complement: a byte equals `want` only if gathered.
      std::vector<uint8_t> got(want.size());
      for (size_t i = 0; i < got.size(); ++i) got[i] = ~want[i];
      ASSERT_TRUE(GatherFromRecord(side, rec, m, e->data,
                                   absl::MakeSpan(got)).ok());
      int64_t elems = 1;
      for (int d = t.stacked ? 1 : 0; d < rec.box.rank(); ++d) {
        elems *= rec.box.shape(d);
      }
      int64_t equal = 0;
      for (size_t i = 0; i < got.size(); ++i) equal += got[i] == want[i];
      ASSERT_EQ(equal, elems * DTypeSize(t.dtype))
          << DescribePart(t, rec.box) << " on engine rank " << rec.rank
          << " buffer " << side.buffers[rec.buffer].name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  if (expect_transformed) {
    EXPECT_GT(transformed, 0) << "no engine record holds a transformed tensor";
  }
  std::printf("engine records checked: %lld, quantized from bf16: %lld\n",
              static_cast<long long>(checked), static_cast<long long>(quantized));
  for (const BufferSpec& b : side.buffers) {
    const SafetensorsEntry* e = files[b.rank]->Find(b.name);
    for (const ByteRange& p : b.padding) {
      for (int64_t i = p.begin; i < p.end(); ++i) {
        ASSERT_EQ(e->data[i], 0) << b.name << " padding byte " << i;
      }
    }
  }
}

struct Case {
  std::string model, trainer, engine;
};

void SimulateAndCheck(const Case& k, int shards, uint32_t seed,
                      bool expect_transformed = false) {
  auto model = LoadModelConfig(k.model);
  ASSERT_TRUE(model.ok()) << model.status();
  auto ts = ParseTrainerSpec(k.trainer);
  auto es = ParseEngineSpec(k.engine);
  ASSERT_TRUE(ts.ok() && es.ok());
  auto dst = BuildEngineLayout(*model, *es);
  ASSERT_TRUE(dst.ok()) << dst.status();
  // The checkpoint holds the trainer's logical tensors.
  auto src = BuildTrainerLayout(*model, *ts);
  ASSERT_TRUE(src.ok()) << src.status();
  Checkpoint c = MakeCheckpoint(src->layout.tensors, seed);
  const std::string dir =
      TmpDir(absl::StrCat(k.model, "-", shards, "-ckpt"));
  const std::string ckpt = WriteCheckpoint(c, dir, shards);
  const std::string out = TmpDir(absl::StrCat(k.model, "-", shards, "-out"));
  CmdResult r = RunRefit(absl::StrCat("simulate --model ", k.model,
                                " --checkpoint ", ckpt, " --trainer ",
                                k.trainer, " --engine ", k.engine, " --out ",
                                out));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("bytes moved: "), std::string::npos) << r.out;
  CheckEngineFiles(*dst, c, out, expect_transformed);
  // Trainer files exist for every trainer rank.
  for (int32_t t = 0; t < ts->world_size(); ++t) {
    struct stat st;
    EXPECT_EQ(stat(absl::StrCat(out, "/trainer/rank", t, ".safetensors")
                       .c_str(), &st), 0) << "trainer rank " << t;
  }
}

TEST(RefitSimulateTest, DenseSingleFileEngineBytesEqualCheckpoint) {
  SimulateAndCheck({"tiny-qwen3", "megatron:tp=2,pp=2,dp=1",
                    "vllm:tp=2,dp=2"}, 1, 1);
}

TEST(RefitSimulateTest, AnOutDirWithATrailingSlashGivesPathsWithOneSlash) {
  auto model = LoadModelConfig("tiny-qwen3");
  ASSERT_TRUE(model.ok()) << model.status();
  auto src = BuildTrainerLayout(*model, *ParseTrainerSpec("fsdp:dp=1"));
  ASSERT_TRUE(src.ok()) << src.status();
  Checkpoint c = MakeCheckpoint(src->layout.tensors, 7);
  const std::string ckpt = WriteCheckpoint(c, TmpDir("slash-ckpt"), 1);
  const std::string out = TmpDir("slash-out");
  CmdResult r = RunRefit(absl::StrCat("simulate --model tiny-qwen3 --checkpoint ", ckpt,
                                      " --trainer fsdp:dp=1 --engine vllm:tp=1 --out ",
                                      out, "/"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("//"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(absl::StrCat("wrote ", out, "/trainer/rank<k>.safetensors and ", out,
                                    "/engine/rank<k>.safetensors")),
            std::string::npos)
      << r.out;
  // A dtype no model takes is a usage error (exit 2), said once.
  CmdResult bad = RunRefit(absl::StrCat("simulate --model tiny-qwen3 --checkpoint ", ckpt,
                                        " --trainer fsdp:dp=1 --engine vllm:tp=1 --out ",
                                        out, " --dtype fp16"));
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("--dtype: weight dtype \"fp16\" is not one of bf16, fp8"),
            std::string::npos)
      << bad.out;
}

TEST(RefitSimulateTest, DenseShardedIndexEngineBytesEqualCheckpoint) {
  SimulateAndCheck({"tiny-llama", "fsdp:dp=3", "vllm:tp=2,dp=1"}, 3, 2);
}

TEST(RefitSimulateTest, MoeEngineBytesEqualCheckpoint) {
  SimulateAndCheck({"tiny-qwen3-moe", "megatron:tp=1,pp=2,ep=2,dp=2",
                    "vllm:tp=2,dp=2,ep=4"}, 2, 3);
}

// vLLM keeps Mamba's A = -exp(A_log): the engine files must hold that, not
// the checkpoint's A_log bytes (every other tensor byte for byte).
TEST(RefitSimulateTest, NemotronHEngineHoldsNegExpOfALog) {
  SimulateAndCheck({"tiny-nemotron-h", "megatron:tp=2,pp=1,dp=1",
                    "vllm:tp=2,dp=1"}, 1, 5, /*expect_transformed=*/true);
}

// A BF16 checkpoint into FP8 engines: every FP8 weight and scale equals the
// reference blockwise quantizer's (128x128 tiles; ue8m0 scales too), the
// rest byte for byte. FSDP's dp=3 shards (torch.chunk rows) cut tiles, which
// the holders' amax exchange quantizes as one; Megatron TP2 does not.
TEST(RefitSimulateTest, Bf16CheckpointIntoFp8Engine) {
  SimulateAndCheck({"tiny-qwen3-moe-b128", "megatron:tp=2,pp=1,ep=2,etp=1",
                    "vllm:tp=2,dp=1,quant=fp8"}, 1, 6);
  SimulateAndCheck({"tiny-qwen3-moe-b128", "fsdp:dp=3",
                    "vllm:tp=1,dp=2,quant=fp8-ue8m0"}, 1, 7);
  SimulateAndCheck({"tiny-deepseek-v3-b128", "fsdp:dp=3", "sglang:tp=2,quant=fp8"}, 1, 8);
}

TEST(RefitSimulateTest, Fp8BlockCheckpointPassesThroughUnchanged) {
  SimulateAndCheck({"tiny-deepseek-v3-fp8", "megatron:tp=1,pp=2,ep=2,dp=2",
                    "vllm:tp=2,dp=1"}, 1, 4);
}

class InvalidCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = LoadModelConfig("tiny-qwen3");
    ASSERT_TRUE(model.ok());
    auto es = ParseEngineSpec("vllm:tp=2,dp=1");
    ASSERT_TRUE(es.ok());
    auto dst = BuildEngineLayout(*model, *es);
    ASSERT_TRUE(dst.ok());
    c_ = MakeCheckpoint(dst->layout.tensors, 9);
  }
  CmdResult Simulate(const std::string& ckpt) {
    return RunRefit("simulate --model tiny-qwen3 --checkpoint " + ckpt +
                    " --trainer fsdp:dp=2 --engine vllm:tp=2,dp=1 --out " +
                    TmpDir("bad-out"));
  }
  Checkpoint c_;
};

TEST_F(InvalidCheckpointTest, MissingTensorIsNamed) {
  const std::string victim = c_.names[3];
  CmdResult r = Simulate(WriteCheckpoint(c_, TmpDir("missing"), 1, victim));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing"), std::string::npos) << r.out;
}

TEST_F(InvalidCheckpointTest, WrongShapeIsNamed) {
  const std::string victim = c_.names[2];
  CmdResult r = Simulate(WriteCheckpoint(c_, TmpDir("shape"), 2, "", victim));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.out;
}

TEST_F(InvalidCheckpointTest, TruncatedFileNamesTheTensor) {
  const std::string path = WriteCheckpoint(c_, TmpDir("trunc"), 1);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(truncate(path.c_str(), st.st_size - 3), 0);
  CmdResult r = Simulate(path);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(c_.names.back()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

TEST_F(InvalidCheckpointTest, UsageErrorsExitTwo) {
  CmdResult r = RunRefit("simulate --model tiny-qwen3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--checkpoint"), std::string::npos) << r.out;
  r = RunRefit("simulate --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* flag : {"--model", "--checkpoint", "--trainer", "--engine",
                           "--out", "--dtype", "--staging_mib", "--lanes",
                           "--timeout_s"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace refit
