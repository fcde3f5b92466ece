// `refit simulate` into vLLM's kernel layouts (engine spec kernel=), run as
// a user would, with the engine files checked byte for byte against
// testing/reference_vllm_layouts: an independent statement of what vLLM
// holds after loading and post-processing the same checkpoint (FlashInfer
// CUTLASS MoE's w31 order, DeepGEMM's UE8M0 requantization), for dense and
// MoE weights, TP-sharded and expert-parallel.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/safetensors.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "testing/reference_vllm_layouts.h"
#include "tests/cli/simulate_harness.h"

namespace refit {
namespace {

using testing::EngineBytes;
using testing::HostWeight;
using testing::VllmFormat;
using testing::VllmKernel;

HostWeight Weight(const Checkpoint& c, const std::string& name) {
  const SafetensorsTensor& m = c.meta.at(name);
  const std::vector<uint8_t>& b = c.bytes.at(name);
  HostWeight w;
  w.rows = m.shape[0];
  w.cols = m.shape[1];
  w.v.resize(b.size() / 2);
  for (size_t i = 0; i < w.v.size(); ++i) {
    const uint32_t bits = (static_cast<uint32_t>(b[2 * i]) |
                           static_cast<uint32_t>(b[2 * i + 1]) << 8) << 16;
    std::memcpy(&w.v[i], &bits, 4);
  }
  return w;
}

struct KernelCase {
  std::string model, trainer, engine;
  VllmFormat format;
};

class EngineFiles {
 public:
  EngineFiles(const std::string& out, int32_t world) {
    for (int32_t r = 0; r < world; ++r) {
      auto f = SafetensorsFile::Open(absl::StrCat(out, "/engine/rank", r, ".safetensors"));
      EXPECT_TRUE(f.ok()) << f.status();
      if (f.ok()) files_.push_back(std::move(*f));
    }
  }
  bool ok() const { return !files_.empty(); }

  // Compares buffer `name` of `rank` (and, for FP8, its _scale_inv) with
  // the reference's bytes.
  void Check(int32_t rank, const std::string& name, const EngineBytes& want, bool fp8) {
    const SafetensorsEntry* w = files_[rank]->Find(name);
    ASSERT_NE(w, nullptr) << "engine rank " << rank << " has no " << name;
    EXPECT_EQ(w->dtype, fp8 ? DType::kF8E4M3 : DType::kBF16) << name;
    ASSERT_EQ(w->data.size(), want.weight.size()) << name;
    EXPECT_TRUE(std::memcmp(w->data.data(), want.weight.data(), want.weight.size()) == 0)
        << name << " on engine rank " << rank << " differs from vLLM's layout";
    ++checked_;
    if (!fp8) return;
    const std::string scale = name + "_scale_inv";
    const SafetensorsEntry* s = files_[rank]->Find(scale);
    ASSERT_NE(s, nullptr) << "engine rank " << rank << " has no " << scale;
    ASSERT_EQ(s->data.size(), want.scale.size()) << scale;
    EXPECT_TRUE(std::memcmp(s->data.data(), want.scale.data(), want.scale.size()) == 0)
        << scale << " on engine rank " << rank << " differs from vLLM's scales";
    ++checked_;
  }
  int checked() const { return checked_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  int checked_ = 0;
};

// Runs simulate and checks every MoE expert buffer, dense MLP and o_proj
// of every engine rank. Returns how many buffers were checked.
void SimulateAndCheck(const KernelCase& k, uint32_t seed, int* experts_checked = nullptr) {
  auto model = LoadModelConfig(k.model);
  ASSERT_TRUE(model.ok()) << model.status();
  auto ts = ParseTrainerSpec(k.trainer);
  auto es = ParseEngineSpec(k.engine);
  ASSERT_TRUE(ts.ok() && es.ok()) << k.engine;
  auto src = BuildTrainerLayout(*model, *ts);
  ASSERT_TRUE(src.ok()) << src.status();
  const Checkpoint c = MakeCheckpoint(src->layout.tensors, seed);
  const std::string dir = TmpDir(absl::StrCat(k.model, "-k", seed, "-ckpt"));
  const std::string ckpt = WriteCheckpoint(c, dir, 1);
  const std::string out = TmpDir(absl::StrCat(k.model, "-k", seed, "-out"));
  CmdResult r = RunRefit(absl::StrCat("simulate --model ", k.model, " --checkpoint ", ckpt,
                                      " --trainer ", k.trainer, " --engine ", k.engine,
                                      " --out ", out));
  ASSERT_EQ(r.rc, 0) << r.out;
  const int64_t tp = es->tp, world = es->world_size();
  EngineFiles files(out, static_cast<int32_t>(world));
  ASSERT_TRUE(files.ok());
  const VllmFormat& f = k.format;
  int moe = 0;
  for (int32_t rank = 0; rank < world; ++rank) {
    const int64_t t = rank % tp;
    for (int64_t l = 0; l < model->num_layers; ++l) {
      const std::string p = absl::StrCat("model.layers.", l, ".");
      if (c.meta.count(p + "mlp.experts.0.gate_proj.weight")) {
        std::vector<HostWeight> gate, up, down;
        for (int64_t e = 0; e < model->num_experts; ++e) {
          const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
          gate.push_back(Weight(c, x + "gate_proj.weight"));
          up.push_back(Weight(c, x + "up_proj.weight"));
          down.push_back(Weight(c, x + "down_proj.weight"));
        }
        const int64_t inter = gate[0].rows;
        std::vector<int64_t> experts;
        int64_t i0 = 0, i1 = inter;
        if (es->ep > 0) {  // linear expert placement, E divisible by ep here
          const int64_t per = model->num_experts / es->ep;
          for (int64_t e = rank * per; e < (rank + 1) * per; ++e) experts.push_back(e);
        } else {
          for (int64_t e = 0; e < model->num_experts; ++e) experts.push_back(e);
          i0 = t * inter / tp;
          i1 = (t + 1) * inter / tp;
        }
        const EngineBytes w13 = testing::VllmW13(gate, up, experts, i0, i1, f);
        files.Check(rank, p + "mlp.experts.w13_weight", w13, f.fp8);
        if (f.kernel == VllmKernel::kFlashinfer) {
          // The test can tell the layouts apart: w31 is not vLLM's [w1; w3].
          VllmFormat plain = f;
          plain.kernel = VllmKernel::kCheckpoint;
          EXPECT_NE(testing::VllmW13(gate, up, experts, i0, i1, plain).weight, w13.weight);
        }
        files.Check(rank, p + "mlp.experts.w2_weight",
                    testing::VllmW2(down, experts, i0, i1, f), f.fp8);
        ++moe;
      }
      for (const char* mlp : {"mlp.", "mlp.shared_experts."}) {
        const std::string m = p + mlp;
        if (!c.meta.count(m + "gate_proj.weight")) continue;
        const HostWeight gate = Weight(c, m + "gate_proj.weight");
        const HostWeight up = Weight(c, m + "up_proj.weight");
        const HostWeight down = Weight(c, m + "down_proj.weight");
        const int64_t il = gate.rows / tp;
        files.Check(rank, m + "gate_up_proj.weight",
                    testing::VllmMerged({&gate, &up}, t * il, (t + 1) * il, f), f.fp8);
        files.Check(rank, m + "down_proj.weight",
                    testing::VllmLinear(down, 0, down.rows, t * il, (t + 1) * il, f), f.fp8);
      }
      if (c.meta.count(p + "self_attn.q_a_proj.weight")) {
        // MLA's fused q_a / kv_a rows (replicated; 128-row tiles of the
        // fused matrix, kv_a's last one cut): one matrix of both.
        HostWeight qkv_a = Weight(c, p + "self_attn.q_a_proj.weight");
        const HostWeight kv_a = Weight(c, p + "self_attn.kv_a_proj_with_mqa.weight");
        qkv_a.rows += kv_a.rows;
        qkv_a.v.insert(qkv_a.v.end(), kv_a.v.begin(), kv_a.v.end());
        files.Check(rank, p + "self_attn.fused_qkv_a_proj.weight",
                    testing::VllmLinear(qkv_a, 0, qkv_a.rows, 0, qkv_a.cols, f), f.fp8);
      }
      const HostWeight o = Weight(c, p + "self_attn.o_proj.weight");
      const int64_t ol = o.cols / tp;
      files.Check(rank, p + "self_attn.o_proj.weight",
                  testing::VllmLinear(o, 0, o.rows, t * ol, (t + 1) * ol, f), f.fp8);
    }
  }
  EXPECT_GT(moe, 0) << "no MoE layer checked";
  std::printf("%s: %d engine buffers equal vLLM's layout\n", k.engine.c_str(), files.checked());
  if (experts_checked != nullptr) *experts_checked = moe;
}

constexpr VllmFormat kFlashinferBf16{false, VllmKernel::kFlashinfer};
constexpr VllmFormat kFlashinferFp8{true, VllmKernel::kFlashinfer};
constexpr VllmFormat kDeepgemm{true, VllmKernel::kDeepgemm};
constexpr VllmFormat kDeepgemmSm100{true, VllmKernel::kDeepgemmSm100};

TEST(RefitSimulateKernelsTest, FlashinferBf16MoeTpHoldsW31) {
  SimulateAndCheck({"tiny-qwen3-moe-b128", "megatron:tp=2,pp=1,ep=2,etp=1",
                    "vllm:tp=2,kernel=flashinfer", kFlashinferBf16},
                   11);
}

TEST(RefitSimulateKernelsTest, FlashinferBlockFp8MoeEpHoldsW31WithScales) {
  SimulateAndCheck({"tiny-deepseek-v3-b128", "fsdp:dp=3",
                    "vllm:tp=2,dp=2,ep=4,quant=fp8,kernel=flashinfer", kFlashinferFp8},
                   12);
}

TEST(RefitSimulateKernelsTest, DeepgemmRequantizedUe8m0DenseAndMoeTp) {
  SimulateAndCheck({"tiny-deepseek-v3-b128", "megatron:tp=2,pp=1,ep=2,etp=1",
                    "vllm:tp=2,quant=fp8,kernel=deepgemm", kDeepgemm},
                   13);
}

TEST(RefitSimulateKernelsTest, DeepgemmRequantizedUe8m0MoeEpCutTiles) {
  // FSDP's dp=3 row shards cut tiles: the holders' amax exchange must give
  // each cut tile one requantized scale.
  SimulateAndCheck({"tiny-qwen3-moe-b128", "fsdp:dp=3",
                    "vllm:tp=1,dp=2,ep=2,quant=fp8,kernel=deepgemm", kDeepgemm},
                   14);
}

// DeepGEMM on SM100: the same requantized weights, each weight_scale_inv the
// int32-packed UE8M0 exponents of its rows (TP parts of fused modules,
// stacked experts).
TEST(RefitSimulateKernelsTest, DeepgemmSm100PackedUe8m0DenseAndMoeTp) {
  SimulateAndCheck({"tiny-deepseek-v3-b128", "megatron:tp=2,pp=1,ep=2,etp=1",
                    "vllm:tp=2,quant=fp8,kernel=deepgemm-sm100", kDeepgemmSm100},
                   15);
}

TEST(RefitSimulateKernelsTest, DeepgemmSm100PackedUe8m0MoeEpCutTiles) {
  // FSDP's dp=3 row shards cut tiles: one exponent per cut tile, read by
  // all of its rows.
  SimulateAndCheck({"tiny-qwen3-moe-b128", "fsdp:dp=3",
                    "vllm:tp=1,dp=2,ep=2,quant=fp8,kernel=deepgemm-sm100", kDeepgemmSm100},
                   16);
}

TEST(RefitSimulateKernelsTest, RefusedKernelsAreNamed) {
  for (const char* kernel : {"trtllm", "marlin", "aiter"}) {
    CmdResult r = RunRefit(absl::StrCat(
        "buffers --model tiny-qwen3-moe-b128 --engine vllm:tp=1,kernel=", kernel));
    EXPECT_NE(r.rc, 0) << kernel;
    EXPECT_NE(r.out.find(absl::StrCat("kernel=", kernel)), std::string::npos) << r.out;
  }
  CmdResult r = RunRefit("buffers --model tiny-qwen3-moe-b128 --engine vllm:tp=1,kernel=deepgemm");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("add quant=fp8"), std::string::npos) << r.out;
}

// refit plan (and so refitd, which plans from the same spec) plans each
// kernel layout as its own plan: the fingerprints differ, and refit buffers
// says which layout the engine buffers hold.
TEST(RefitSimulateKernelsTest, PlanFingerprintAndBuffersNameTheKernelLayout) {
  std::vector<std::string> fingerprints;
  for (const char* kernel :
       {"", ",kernel=flashinfer", ",kernel=deepgemm", ",kernel=deepgemm-sm100"}) {
    const std::string engine = absl::StrCat("vllm:tp=2,quant=fp8", kernel);
    CmdResult r = RunRefit(absl::StrCat("plan --model tiny-qwen3-moe-b128 --trainer fsdp:dp=2 --engine ",
                                        engine));
    ASSERT_EQ(r.rc, 0) << r.out;
    const size_t at = r.out.find("plan fingerprint: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    fingerprints.push_back(r.out.substr(at, r.out.find('\n', at) - at));
    CmdResult b = RunRefit(absl::StrCat("buffers --model tiny-qwen3-moe-b128 --engine ", engine));
    ASSERT_EQ(b.rc, 0) << b.out;
    EXPECT_NE(b.out.find(absl::StrCat("kernel layout: ",
                                      *kernel ? std::string(kernel + 8) : "checkpoint")),
              std::string::npos)
        << b.out;
  }
  EXPECT_NE(fingerprints[0], fingerprints[1]);
  EXPECT_NE(fingerprints[0], fingerprints[2]);
  EXPECT_NE(fingerprints[1], fingerprints[2]);
  EXPECT_NE(fingerprints[2], fingerprints[3]);
}

}  // namespace
}  // namespace refit
